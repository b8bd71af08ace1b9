//! The KEYS of the scripts called from more than one place, in their frozen
//! order (scripts.md Part 2). The order is part of L2: keeping each list in
//! one place means the worker, the actors, the tools and the tests cannot
//! drift apart.

use crate::keys::QueueKeys;

impl QueueKeys {
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

    /// getStateV2-8.
    pub fn get_state_keys(&self) -> Vec<String> {
        vec![
            self.completed(),
            self.failed(),
            self.delayed(),
            self.active(),
            self.wait(),
            self.paused(),
            self.waiting_children(),
            self.prioritized(),
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
            (
                ScriptId::MoveStalledJobsToWait,
                k.move_stalled_jobs_to_wait_keys(),
            ),
            (ScriptId::GetStateV2, k.get_state_keys()),
            (ScriptId::AddJobScheduler, k.add_job_scheduler_keys()),
            (
                ScriptId::UpdateJobScheduler,
                k.update_job_scheduler_keys("repeat:s:1"),
            ),
        ];
        for (id, keys) in cases {
            assert_eq!(keys.len(), id.num_keys(), "{}", id.name());
        }
    }
}
