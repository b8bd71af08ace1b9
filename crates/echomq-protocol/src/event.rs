//! Entries of the events stream `{P}events` (docs/protocol.md §Events), as typed values.

use serde_json::Value;

/// One stream entry: its id (`<ms>-<seq>`, Redis server clock) and what it says.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The stream entry id; a consumer resumes after it.
    pub id: String,
    /// The decoded event.
    pub kind: EventKind,
}

/// What an entry of the events stream says. Fields follow docs/protocol.md §Events;
/// anything this version does not know arrives as [`EventKind::Unknown`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// A job was stored.
    Added {
        /// Job id.
        job_id: String,
        /// Job name.
        name: String,
    },
    /// A job became ready; `prev` is the state it came from, when given.
    Waiting {
        /// Job id.
        job_id: String,
        /// Previous state (`delayed`, `active`, `completed`, …).
        prev: Option<String>,
    },
    /// A job entered `delayed`; `delay` is the absolute due time in ms.
    Delayed {
        /// Job id.
        job_id: String,
        /// Due time, ms since the epoch.
        delay: u64,
    },
    /// A worker took a job.
    Active {
        /// Job id.
        job_id: String,
        /// Always `waiting` in 6.2.0 and 6.7.0.
        prev: Option<String>,
    },
    /// Progress was reported.
    Progress {
        /// Job id.
        job_id: String,
        /// The progress value (JSON).
        data: Value,
    },
    /// A job completed.
    Completed {
        /// Job id.
        job_id: String,
        /// The result (JSON; `null` for none).
        return_value: Value,
        /// Always `active`.
        prev: Option<String>,
    },
    /// A job failed for the last time.
    Failed {
        /// Job id.
        job_id: String,
        /// The failure message.
        failed_reason: String,
        /// Always `active`.
        prev: Option<String>,
    },
    /// A failed job used up its attempts.
    RetriesExhausted {
        /// Job id.
        job_id: String,
        /// attemptsMade after the final failure.
        attempts_made: u64,
    },
    /// A job was recovered from a dead worker.
    Stalled {
        /// Job id.
        job_id: String,
    },
    /// The queue was paused.
    Paused,
    /// The queue was resumed.
    Resumed,
    /// The queue has nothing waiting or active.
    Drained,
    /// A job was removed.
    Removed {
        /// Job id.
        job_id: String,
        /// The state it was removed from.
        prev: String,
    },
    /// A clean call deleted `count` jobs.
    Cleaned {
        /// How many.
        count: u64,
    },
    /// An add with an existing custom id was ignored.
    Duplicated {
        /// The existing id.
        job_id: String,
    },
    /// An add was dropped (or replaced) by deduplication.
    Deduplicated {
        /// The surviving job.
        job_id: String,
        /// The deduplication id.
        deduplication_id: String,
        /// The dropped (or replaced) job.
        deduplicated_job_id: String,
    },
    /// A parent job waits for its children.
    WaitingChildren {
        /// Job id.
        job_id: String,
        /// `active` when a running job moved there.
        prev: Option<String>,
    },
    /// An event this version does not model, with all its fields.
    Unknown {
        /// The `event` field.
        name: String,
        /// The other fields in stream order.
        fields: Vec<(String, String)>,
    },
}

impl EventKind {
    /// The job the event is about, if any.
    pub fn job_id(&self) -> Option<&str> {
        use EventKind::*;
        match self {
            Added { job_id, .. }
            | Waiting { job_id, .. }
            | Delayed { job_id, .. }
            | Active { job_id, .. }
            | Progress { job_id, .. }
            | Completed { job_id, .. }
            | Failed { job_id, .. }
            | RetriesExhausted { job_id, .. }
            | Stalled { job_id }
            | Removed { job_id, .. }
            | Duplicated { job_id }
            | Deduplicated { job_id, .. }
            | WaitingChildren { job_id, .. } => Some(job_id),
            Unknown { fields, .. } => fields
                .iter()
                .find(|(k, _)| k == "jobId")
                .map(|(_, v)| v.as_str()),
            Paused | Resumed | Drained | Cleaned { .. } => None,
        }
    }

    /// The wire name (`retries-exhausted`, `waiting-children`, …).
    pub fn name(&self) -> &str {
        use EventKind::*;
        match self {
            Added { .. } => "added",
            Waiting { .. } => "waiting",
            Delayed { .. } => "delayed",
            Active { .. } => "active",
            Progress { .. } => "progress",
            Completed { .. } => "completed",
            Failed { .. } => "failed",
            RetriesExhausted { .. } => "retries-exhausted",
            Stalled { .. } => "stalled",
            Paused => "paused",
            Resumed => "resumed",
            Drained => "drained",
            Removed { .. } => "removed",
            Cleaned { .. } => "cleaned",
            Duplicated { .. } => "duplicated",
            Deduplicated { .. } => "deduplicated",
            WaitingChildren { .. } => "waiting-children",
            Unknown { name, .. } => name,
        }
    }
}

impl Event {
    /// Decodes one stream entry from its id and flat field list. An entry whose
    /// known name lacks a required field is kept as `Unknown` rather than dropped,
    /// so a consumer never loses an entry to a decoding rule.
    pub fn parse(id: impl Into<String>, fields: Vec<(String, String)>) -> Event {
        let id = id.into();
        let kind = decode(&fields).unwrap_or_else(|| {
            let name = fields
                .iter()
                .find(|(k, _)| k == "event")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            EventKind::Unknown {
                name,
                fields: fields.into_iter().filter(|(k, _)| k != "event").collect(),
            }
        });
        Event { id, kind }
    }
}

fn decode(fields: &[(String, String)]) -> Option<EventKind> {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let job = || get("jobId");
    let json = |s: String| serde_json::from_str(&s).unwrap_or(Value::String(s));
    let num = |s: String| {
        s.parse::<u64>()
            .ok()
            .or_else(|| s.parse::<f64>().ok().map(|f| f as u64))
    };
    Some(match get("event")?.as_str() {
        "added" => EventKind::Added {
            job_id: job()?,
            name: get("name").unwrap_or_default(),
        },
        "waiting" => EventKind::Waiting {
            job_id: job()?,
            prev: get("prev"),
        },
        "delayed" => EventKind::Delayed {
            job_id: job()?,
            delay: num(get("delay")?)?,
        },
        "active" => EventKind::Active {
            job_id: job()?,
            prev: get("prev"),
        },
        "progress" => EventKind::Progress {
            job_id: job()?,
            data: json(get("data")?),
        },
        "completed" => EventKind::Completed {
            job_id: job()?,
            return_value: get("returnvalue").map(json).unwrap_or(Value::Null),
            prev: get("prev"),
        },
        "failed" => EventKind::Failed {
            job_id: job()?,
            failed_reason: get("failedReason").unwrap_or_default(),
            prev: get("prev"),
        },
        "retries-exhausted" => EventKind::RetriesExhausted {
            job_id: job()?,
            attempts_made: num(get("attemptsMade")?)?,
        },
        "stalled" => EventKind::Stalled { job_id: job()? },
        "paused" => EventKind::Paused,
        "resumed" => EventKind::Resumed,
        "drained" => EventKind::Drained,
        "removed" => EventKind::Removed {
            job_id: job()?,
            prev: get("prev").unwrap_or_default(),
        },
        "cleaned" => EventKind::Cleaned {
            count: num(get("count")?)?,
        },
        "duplicated" => EventKind::Duplicated { job_id: job()? },
        "deduplicated" => EventKind::Deduplicated {
            job_id: job()?,
            deduplication_id: get("deduplicationId")?,
            deduplicated_job_id: get("deduplicatedJobId")?,
        },
        "waiting-children" => EventKind::WaitingChildren {
            job_id: job()?,
            prev: get("prev"),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn typed_events() {
        let e = Event::parse(
            "1-0",
            f(&[
                ("event", "completed"),
                ("jobId", "3"),
                ("returnvalue", "{\"x\":1}"),
                ("prev", "active"),
            ]),
        );
        assert_eq!(e.kind.job_id(), Some("3"));
        assert!(
            matches!(e.kind, EventKind::Completed { ref return_value, .. } if return_value["x"] == 1)
        );
        let e = Event::parse(
            "1-1",
            f(&[
                ("event", "delayed"),
                ("jobId", "4"),
                ("delay", "1700000000500"),
            ]),
        );
        assert_eq!(
            e.kind,
            EventKind::Delayed {
                job_id: "4".into(),
                delay: 1_700_000_000_500
            }
        );
        let e = Event::parse("1-2", f(&[("event", "drained")]));
        assert_eq!(e.kind, EventKind::Drained);
    }

    #[test]
    fn unknown_and_malformed_are_kept() {
        let e = Event::parse("1-0", f(&[("event", "custom"), ("x", "y")]));
        assert_eq!(
            e.kind,
            EventKind::Unknown {
                name: "custom".into(),
                fields: f(&[("x", "y")])
            }
        );
        let e = Event::parse("1-0", f(&[("event", "delayed"), ("jobId", "1")]));
        assert!(matches!(e.kind, EventKind::Unknown { ref name, .. } if name == "delayed"));
    }
}
