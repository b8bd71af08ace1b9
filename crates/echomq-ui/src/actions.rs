//! The operator's actions. Each is one typed method of [`Queue`]: the
//! dashboard never writes a key itself.

use std::time::Duration;

use echomq::dead_letter::{DeadLetterFilter, ReplayOptions};
use echomq::queue::{CancelMode, CancelOutcome, RemoveOutcome};
use echomq::{JobOptions, JobState, Queue};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::Failure;
use crate::model::parse_state;

/// Retried per script call by "retry all failed" (BullMQ's default chunk).
const RETRY_CHUNK: u64 = 1000;
/// Largest job data the add form takes, in bytes.
const MAX_FORM_DATA: usize = 1024 * 1024;
/// Longest cancel reason the dashboard takes, in bytes.
const MAX_REASON: usize = 1000;

/// The fields any action may take, as a form or a JSON body sends them.
/// Every value is text: a form has nothing else.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ActionInput {
    pub job: Option<String>,
    pub state: Option<String>,
    pub grace_ms: Option<String>,
    pub limit: Option<String>,
    pub delayed: Option<String>,
    pub name: Option<String>,
    pub data: Option<String>,
    pub delay_ms: Option<String>,
    pub attempts: Option<String>,
    /// Why a job is cancelled (its failure reason).
    pub reason: Option<String>,
    /// Retry a cancelled job if attempts remain.
    pub retry: Option<String>,
    /// The group of a group action.
    pub group: Option<String>,
    /// A group's concurrency.
    pub concurrency: Option<String>,
    /// A group's rate limit: releases per window.
    pub max: Option<String>,
    /// A group's rate limit: the window.
    pub duration_ms: Option<String>,
    /// The CSRF token of a form.
    pub csrf: Option<String>,
}

impl ActionInput {
    /// Reads a JSON body: numbers, booleans and an object `data` are taken
    /// as their text.
    pub fn from_json(v: &Value) -> Result<Self, Failure> {
        let Value::Object(m) = v else {
            return Err(Failure::bad_request("the body must be a JSON object"));
        };
        let text = |k: &str| -> Option<String> {
            match m.get(k)? {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            }
        };
        Ok(ActionInput {
            job: text("job"),
            state: text("state"),
            grace_ms: text("grace_ms"),
            limit: text("limit"),
            delayed: text("delayed"),
            name: text("name"),
            data: text("data"),
            delay_ms: text("delay_ms"),
            attempts: text("attempts"),
            reason: text("reason"),
            retry: text("retry"),
            group: text("group"),
            concurrency: text("concurrency"),
            max: text("max"),
            duration_ms: text("duration_ms"),
            csrf: None,
        })
    }
}

/// One action on one queue.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action {
    Retry {
        job: String,
    },
    Promote {
        job: String,
    },
    Remove {
        job: String,
    },
    Cancel {
        job: String,
        reason: String,
        retry: bool,
    },
    Pause,
    Resume,
    Clean {
        state: JobState,
        grace_ms: u64,
        limit: u64,
    },
    Drain {
        delayed: bool,
    },
    Add {
        name: String,
        data: Value,
        delay_ms: Option<u64>,
        attempts: Option<i64>,
    },
    RetryFailed,
    GroupPause {
        group: String,
    },
    GroupResume {
        group: String,
    },
    GroupConcurrency {
        group: String,
        concurrency: u64,
    },
    GroupRateLimit {
        group: String,
        max: u64,
        duration_ms: u64,
    },
    /// One dead letter back to its source queue (the queue is a dead-letter queue).
    DlqReplay {
        letter: String,
    },
    /// The dead letters matching a name and a reason text, at most `limit`.
    DlqReplayMatching {
        name: Option<String>,
        reason: Option<String>,
        limit: u64,
    },
}

/// What the confirm step of action `name` asks, `None` for no such action.
pub(crate) fn question(
    name: &str,
    queue: &str,
    job: Option<&str>,
    group: Option<&str>,
) -> Option<String> {
    let job = job.unwrap_or("?");
    let group = group.unwrap_or("?");
    Some(match name {
        "retry" => format!("Retry job {job} of queue {queue}?"),
        "promote" => format!("Promote delayed job {job} of queue {queue} now?"),
        "remove" => format!("Remove job {job} (and its children) from queue {queue}?"),
        "cancel" => format!(
            "Cancel job {job} of queue {queue}? A running attempt is stopped and failed; a job not started yet is removed."
        ),
        "pause" => format!("Pause queue {queue}? Workers stop taking its jobs."),
        "resume" => format!("Resume queue {queue}?"),
        "clean" => {
            format!("Delete the jobs of queue {queue} of this state older than the grace period?")
        }
        "drain" => format!("Remove every waiting job of queue {queue}? This cannot be undone."),
        "add" => format!("Add this job to queue {queue}?"),
        "retry-failed" => format!("Move every failed job of queue {queue} back to wait?"),
        "group-pause" => format!(
            "Pause group {group} of queue {queue}? Its jobs are not released until resumed; released ones run on."
        ),
        "group-resume" => format!("Resume group {group} of queue {queue}?"),
        "group-concurrency" => format!("Set the concurrency of group {group} of queue {queue}?"),
        "group-rate-limit" => format!("Set the rate limit of group {group} of queue {queue}?"),
        "dlq-replay" => format!(
            "Replay dead letter {job} of queue {queue}: back to its source queue as a fresh job, out of {queue}?"
        ),
        "dlq-replay-matching" => format!(
            "Replay the dead letters of queue {queue} matching these filters (oldest first) to their source queues?"
        ),
        _ => return None,
    })
}

/// The action names of the routes, in menu order.
pub(crate) const ACTIONS: [&str; 16] = [
    "retry",
    "promote",
    "remove",
    "cancel",
    "pause",
    "resume",
    "clean",
    "drain",
    "add",
    "retry-failed",
    "group-pause",
    "group-resume",
    "group-concurrency",
    "group-rate-limit",
    "dlq-replay",
    "dlq-replay-matching",
];

/// The actions about one group (they need a `group` field).
pub(crate) const GROUP_ACTIONS: [&str; 4] = [
    "group-pause",
    "group-resume",
    "group-concurrency",
    "group-rate-limit",
];

fn non_empty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn number<T: std::str::FromStr>(v: &Option<String>, what: &str) -> Result<Option<T>, Failure> {
    non_empty(v)
        .map(|s| {
            s.parse::<T>()
                .map_err(|_| Failure::bad_request(format!("{what} must be a number")))
        })
        .transpose()
}

fn flag(v: &Option<String>) -> bool {
    matches!(non_empty(v), Some("true" | "on" | "1" | "yes"))
}

impl Action {
    /// The action `name` with its input, validated before anything runs.
    pub fn parse(name: &str, input: &ActionInput) -> Result<Action, Failure> {
        let job = || {
            non_empty(&input.job)
                .map(str::to_owned)
                .ok_or_else(|| Failure::bad_request(format!("{name} needs a job id")))
        };
        let group = || -> Result<String, Failure> {
            let g = non_empty(&input.group)
                .ok_or_else(|| Failure::bad_request(format!("{name} needs a group id")))?;
            echomq::protocol::group::validate_group_id(g)
                .map_err(|e| Failure::bad_request(e.to_string()))?;
            Ok(g.to_owned())
        };
        let positive = |v: &Option<String>, what: &str| -> Result<u64, Failure> {
            number::<u64>(v, what)?
                .filter(|n| *n >= 1)
                .ok_or_else(|| Failure::bad_request(format!("{what} must be at least 1")))
        };
        Ok(match name {
            "group-pause" => Action::GroupPause { group: group()? },
            "group-resume" => Action::GroupResume { group: group()? },
            "group-concurrency" => Action::GroupConcurrency {
                group: group()?,
                concurrency: positive(&input.concurrency, "concurrency")?,
            },
            "group-rate-limit" => Action::GroupRateLimit {
                group: group()?,
                max: positive(&input.max, "max")?,
                duration_ms: positive(&input.duration_ms, "duration_ms")?,
            },
            "dlq-replay" => Action::DlqReplay { letter: job()? },
            "dlq-replay-matching" => Action::DlqReplayMatching {
                name: non_empty(&input.name).map(str::to_owned),
                reason: non_empty(&input.reason).map(str::to_owned),
                limit: positive(&input.limit, "limit")?,
            },
            "retry" => Action::Retry { job: job()? },
            "promote" => Action::Promote { job: job()? },
            "remove" => Action::Remove { job: job()? },
            "cancel" => {
                let reason = non_empty(&input.reason).unwrap_or("cancelled from the dashboard");
                if reason.len() > MAX_REASON {
                    return Err(Failure::bad_request(
                        "the reason is longer than 1,000 bytes",
                    ));
                }
                Action::Cancel {
                    job: job()?,
                    reason: reason.to_owned(),
                    retry: flag(&input.retry),
                }
            }
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            "clean" => Action::Clean {
                state: parse_state(non_empty(&input.state).unwrap_or("completed"))?,
                grace_ms: number(&input.grace_ms, "grace_ms")?.unwrap_or(0),
                limit: number(&input.limit, "limit")?.unwrap_or(1000),
            },
            "drain" => Action::Drain {
                delayed: flag(&input.delayed),
            },
            "add" => {
                let name = non_empty(&input.name)
                    .ok_or_else(|| Failure::bad_request("add needs a job name"))?
                    .to_owned();
                let text = non_empty(&input.data).unwrap_or("{}");
                if text.len() > MAX_FORM_DATA {
                    return Err(Failure::bad_request("job data is larger than 1 MiB"));
                }
                let data = serde_json::from_str(text)
                    .map_err(|e| Failure::bad_request(format!("job data is not JSON: {e}")))?;
                Action::Add {
                    name,
                    data,
                    delay_ms: number(&input.delay_ms, "delay_ms")?,
                    attempts: number(&input.attempts, "attempts")?,
                }
            }
            "retry-failed" => Action::RetryFailed,
            other => return Err(Failure::not_found(format!("no action {other:?}"))),
        })
    }

    /// The job the action is about, if one.
    pub fn job(&self) -> Option<&str> {
        match self {
            Action::Retry { job }
            | Action::Promote { job }
            | Action::Remove { job }
            | Action::Cancel { job, .. } => Some(job),
            _ => None,
        }
    }

    /// The group the action is about, if one.
    pub fn group(&self) -> Option<&str> {
        match self {
            Action::GroupPause { group }
            | Action::GroupResume { group }
            | Action::GroupConcurrency { group, .. }
            | Action::GroupRateLimit { group, .. } => Some(group),
            _ => None,
        }
    }

    /// Runs the action through the queue's typed method.
    pub async fn run(&self, q: &Queue) -> Result<Value, Failure> {
        Ok(match self {
            Action::Retry { job } => {
                q.retry_job(job, false).await?;
                json!({ "retried": job })
            }
            Action::Promote { job } => {
                q.promote(job).await?;
                json!({ "promoted": job })
            }
            Action::Remove { job } => match q.remove(job, true).await? {
                RemoveOutcome::Removed => json!({ "removed": job }),
                RemoveOutcome::Locked => {
                    return Err(Failure::new(
                        axum::http::StatusCode::CONFLICT,
                        format!("job {job} is locked by a worker; nothing was removed"),
                    ))
                }
            },
            Action::Cancel { job, reason, retry } => {
                let mode = if *retry {
                    CancelMode::Retry
                } else {
                    CancelMode::Fail
                };
                match q.cancel(job, reason, mode).await? {
                    CancelOutcome::Stopped { retrying } => {
                        json!({ "cancelled": job, "stopped": true, "retrying": retrying })
                    }
                    CancelOutcome::Removed => json!({ "cancelled": job, "removed": true }),
                    CancelOutcome::AlreadyFinished(state) => {
                        return Err(Failure::new(
                            axum::http::StatusCode::CONFLICT,
                            format!(
                                "job {job} had already finished ({}); nothing changed",
                                state.as_str()
                            ),
                        ))
                    }
                    CancelOutcome::NotFound => {
                        return Err(Failure::not_found(format!("job {job} not found")))
                    }
                    other => json!({ "cancelled": job, "outcome": format!("{other:?}") }),
                }
            }
            Action::Pause => {
                q.pause().await?;
                json!({ "paused": true })
            }
            Action::Resume => {
                q.resume().await?;
                json!({ "paused": false })
            }
            Action::Clean {
                state,
                grace_ms,
                limit,
            } => {
                let ids = q
                    .clean(Duration::from_millis(*grace_ms), *limit, *state)
                    .await?;
                json!({ "cleaned": ids.len() })
            }
            Action::Drain { delayed } => {
                q.drain(*delayed).await?;
                json!({ "drained": true })
            }
            Action::Add {
                name,
                data,
                delay_ms,
                attempts,
            } => {
                let mut opts = JobOptions::new();
                if let Some(ms) = delay_ms {
                    opts = opts.delay(Duration::from_millis(*ms));
                }
                if let Some(n) = attempts {
                    opts = opts.attempts(*n);
                }
                json!({ "id": q.add(name, data, opts).await? })
            }
            Action::RetryFailed => {
                json!({ "retried": q.chunked(RETRY_CHUNK).retry_jobs(echomq::protocol::FinishTarget::Failed, None).await? })
            }
            Action::GroupPause { group } => {
                json!({ "group": group, "paused": true, "changed": q.groups().pause(group).await? })
            }
            Action::GroupResume { group } => {
                json!({ "group": group, "paused": false, "changed": q.groups().resume(group).await? })
            }
            Action::GroupConcurrency { group, concurrency } => {
                q.groups().set_concurrency(group, *concurrency).await?;
                json!({ "group": group, "concurrency": concurrency })
            }
            Action::GroupRateLimit {
                group,
                max,
                duration_ms,
            } => {
                q.groups()
                    .set_rate_limit(group, *max, Duration::from_millis(*duration_ms))
                    .await?;
                json!({ "group": group, "max": max, "duration_ms": duration_ms })
            }
            Action::DlqReplay { letter } => {
                let id = q.dead_letters().replay_one(letter).await?;
                json!({ "replayed": letter, "id": id })
            }
            Action::DlqReplayMatching {
                name,
                reason,
                limit,
            } => {
                let mut filter = DeadLetterFilter::all();
                filter.name = name.clone();
                filter.reason = reason.clone();
                let report = q
                    .dead_letters()
                    .replay(&filter, ReplayOptions::default().limit(*limit))
                    .await?;
                json!({ "replayed": report.replayed.len(), "left": report.skipped.len() })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(pairs: &[(&str, &str)]) -> ActionInput {
        let v: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect();
        ActionInput::from_json(&Value::Object(v)).unwrap()
    }

    #[test]
    fn actions_are_validated_before_running() {
        assert!(Action::parse("retry", &input(&[])).is_err());
        assert_eq!(
            Action::parse("retry", &input(&[("job", "7")])).unwrap(),
            Action::Retry { job: "7".into() }
        );
        assert!(Action::parse("add", &input(&[("name", "x"), ("data", "{")])).is_err());
        assert!(Action::parse("clean", &input(&[("state", "nope")])).is_err());
        assert!(Action::parse("obliterate", &input(&[])).is_err());
        assert!(Action::parse("group-pause", &input(&[])).is_err());
        assert!(Action::parse("dlq-replay", &input(&[])).is_err());
        assert!(Action::parse("dlq-replay-matching", &input(&[("limit", "0")])).is_err());
        assert!(Action::parse("group-pause", &input(&[("group", "a:b")])).is_err());
        assert!(Action::parse(
            "group-concurrency",
            &input(&[("group", "t"), ("concurrency", "0")])
        )
        .is_err());
        assert_eq!(
            Action::parse(
                "group-rate-limit",
                &input(&[("group", "t"), ("max", "5"), ("duration_ms", "1000")])
            )
            .unwrap(),
            Action::GroupRateLimit {
                group: "t".into(),
                max: 5,
                duration_ms: 1000
            }
        );
        assert_eq!(
            Action::parse("drain", &input(&[("delayed", "on")])).unwrap(),
            Action::Drain { delayed: true }
        );
        let json = ActionInput::from_json(
            &serde_json::json!({"name": "n", "data": {"a": 1}, "attempts": 3}),
        )
        .unwrap();
        assert_eq!(
            Action::parse("add", &json).unwrap(),
            Action::Add {
                name: "n".into(),
                data: serde_json::json!({"a": 1}),
                delay_ms: None,
                attempts: Some(3)
            }
        );
    }
}
