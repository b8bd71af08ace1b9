//! Changes to one job: delay, priority, progress, data, logs.

use std::time::Duration;

use echomq_protocol::call::admin::{
    AddLog, ChangeDelay, ChangePriority, UpdateData, UpdateProgress,
};
use echomq_protocol::{JobOptions, ScriptCall, ScriptErrorCode};
use serde::Serialize;

use super::handle::Queue;
use crate::error::{Error, Result};

impl Queue {
    /// Runs a call whose "job does not exist" reply is [`Error::JobNotFound`].
    async fn call_on_job<C: ScriptCall>(&self, id: &str, call: &C) -> Result<C::Output> {
        match self.conn.call(call).await {
            Err(Error::Script {
                code: ScriptErrorCode::JobNotExist,
                ..
            }) => Err(Error::JobNotFound(id.to_owned())),
            other => other,
        }
    }

    /// Sets a new delay (from now) on a delayed job.
    pub async fn change_delay(&self, id: &str, delay: Duration) -> Result<()> {
        let call = ChangeDelay {
            keys: &self.keys,
            id,
            delay,
            now_ms: crate::clock::now_ms(),
        };
        self.call_on_job(id, &call).await
    }

    /// Sets a new priority; a waiting job moves to its new place.
    pub async fn change_priority(&self, id: &str, priority: i64, lifo: bool) -> Result<()> {
        JobOptions::new().priority(priority).validate()?;
        let call = ChangePriority {
            keys: &self.keys,
            id,
            priority,
            lifo,
        };
        self.call_on_job(id, &call).await
    }

    /// Stores progress (any JSON value) and emits `progress`.
    pub async fn update_progress(&self, id: &str, progress: &impl Serialize) -> Result<()> {
        let json = Self::encode_data(progress, usize::MAX)?;
        let call = UpdateProgress {
            keys: &self.keys,
            id,
            progress: &json,
        };
        self.call_on_job(id, &call).await
    }

    /// Replaces a job's data.
    pub async fn update_data(&self, id: &str, data: &impl Serialize) -> Result<()> {
        let json = self.store_data(data, self.options.max_data_bytes)?;
        let call = UpdateData {
            keys: &self.keys,
            id,
            data: &json,
        };
        self.call_on_job(id, &call).await
    }

    /// Appends a log line, keeping only the newest `keep_logs` lines when given.
    /// Returns the number of lines kept.
    pub async fn add_log(&self, id: &str, line: &str, keep_logs: Option<u64>) -> Result<u64> {
        let call = AddLog {
            keys: &self.keys,
            id,
            line,
            keep_logs,
        };
        self.call_on_job(id, &call).await
    }
}
