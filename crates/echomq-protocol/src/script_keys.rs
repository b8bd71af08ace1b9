//! The KEYS of the scripts called from more than one place, in their frozen
//! order (scripts.md Part 2). The order is part of L2: keeping each list in
//! one place means the worker, the actors, the tools and the tests cannot
//! drift apart.

use crate::keys::QueueKeys;

/// Which set a finishing job goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishTarget {
    /// `{P}completed`.
    Completed,
    /// `{P}failed`.
    Failed,
}

impl FinishTarget {
    /// `completed` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishTarget::Completed => "completed",
            FinishTarget::Failed => "failed",
        }
    }
}

impl QueueKeys {
    /// moveToActive-11.
    pub fn move_to_active_keys(&self) -> Vec<String> {
        vec![
            self.wait(),
            self.active(),
            self.prioritized(),
            self.events(),
            self.stalled(),
            self.limiter(),
            self.delayed(),
            self.paused(),
            self.meta(),
            self.pc(),
            self.marker(),
        ]
    }

    /// moveToFinished-14 for job `id` going to `target`.
    pub fn move_to_finished_keys(&self, id: &str, target: FinishTarget) -> Vec<String> {
        vec![
            self.wait(),
            self.active(),
            self.prioritized(),
            self.events(),
            self.stalled(),
            self.limiter(),
            self.delayed(),
            self.paused(),
            self.meta(),
            self.pc(),
            self.key(target.as_str()),
            self.job(id),
            self.metrics(target.as_str()),
            self.marker(),
        ]
    }

    /// moveToDelayed-12 for job `id`.
    pub fn move_to_delayed_keys(&self, id: &str) -> Vec<String> {
        vec![
            self.marker(),
            self.active(),
            self.prioritized(),
            self.delayed(),
            self.job(id),
            self.events(),
            self.meta(),
            self.stalled(),
            self.wait(),
            self.limiter(),
            self.paused(),
            self.pc(),
        ]
    }

    /// retryJob-11 for job `id`.
    pub fn retry_job_keys(&self, id: &str) -> Vec<String> {
        vec![
            self.active(),
            self.wait(),
            self.paused(),
            self.job(id),
            self.meta(),
            self.events(),
            self.delayed(),
            self.prioritized(),
            self.pc(),
            self.marker(),
            self.stalled(),
        ]
    }

    /// moveJobFromActiveToWait-9 (the job travels as an argument).
    pub fn move_job_from_active_to_wait_keys(&self) -> Vec<String> {
        vec![
            self.active(),
            self.wait(),
            self.stalled(),
            self.paused(),
            self.meta(),
            self.limiter(),
            self.prioritized(),
            self.marker(),
            self.events(),
        ]
    }

    /// moveStalledJobsToWait-8 (DECISIONS.md §1).
    pub fn move_stalled_jobs_to_wait_keys(&self) -> Vec<String> {
        vec![
            self.stalled(),
            self.wait(),
            self.active(),
            self.stalled_check(),
            self.meta(),
            self.marker(),
            self.events(),
            self.repeat(),
        ]
    }

    /// addJobScheduler-11.
    pub fn add_job_scheduler_keys(&self) -> Vec<String> {
        vec![
            self.repeat(),
            self.delayed(),
            self.wait(),
            self.paused(),
            self.meta(),
            self.prioritized(),
            self.marker(),
            self.id(),
            self.events(),
            self.pc(),
            self.active(),
        ]
    }

    /// updateJobScheduler-12, called for the iteration `producer_id` just taken.
    pub fn update_job_scheduler_keys(&self, producer_id: &str) -> Vec<String> {
        vec![
            self.repeat(),
            self.delayed(),
            self.wait(),
            self.paused(),
            self.meta(),
            self.prioritized(),
            self.marker(),
            self.id(),
            self.events(),
            self.pc(),
            self.job(producer_id),
            self.active(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScriptId;

    #[test]
    fn every_list_has_the_scripts_key_count() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let cases = [
            (ScriptId::MoveToActive, k.move_to_active_keys()),
            (
                ScriptId::MoveToFinished,
                k.move_to_finished_keys("1", FinishTarget::Failed),
            ),
            (ScriptId::MoveToDelayed, k.move_to_delayed_keys("1")),
            (ScriptId::RetryJob, k.retry_job_keys("1")),
            (
                ScriptId::MoveJobFromActiveToWait,
                k.move_job_from_active_to_wait_keys(),
            ),
            (
                ScriptId::MoveStalledJobsToWait,
                k.move_stalled_jobs_to_wait_keys(),
            ),
            (ScriptId::AddJobScheduler, k.add_job_scheduler_keys()),
            (
                ScriptId::UpdateJobScheduler,
                k.update_job_scheduler_keys("repeat:s:1"),
            ),
        ];
        for (id, keys) in cases {
            assert_eq!(keys.len(), id.num_keys(), "{}", id.name());
        }
        assert_eq!(
            k.move_to_finished_keys("7", FinishTarget::Completed)[10..13],
            ["emq:q:completed", "emq:q:7", "emq:q:metrics:completed"]
        );
    }
}
