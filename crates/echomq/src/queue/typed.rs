//! [`TypedQueue`]: the producer side of typed jobs, `queue.typed::<T>()`.

use std::fmt;
use std::marker::PhantomData;

use echomq_protocol::validate::ValidationError;
use echomq_protocol::{Job, JobOptions};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::handle::Queue;
use super::types::NewJob;
use crate::error::Result;
use crate::worker::process::typed::DataError;

/// A [`Queue`] whose jobs carry a `T`: `add` takes `&T`, so a producer
/// cannot send data its workers would not read. The JSON stored is
/// `serde_json`'s of `T`, fields in declaration order, which is what
/// `JSON.stringify` writes for a Node object built in the same order. The
/// untyped [`Queue`] stays available ([`TypedQueue::queue`]).
pub struct TypedQueue<T> {
    queue: Queue,
    // A function pointer: the handle is Send + Sync whatever T is.
    _data: PhantomData<fn(&T)>,
}

impl<T> Clone for TypedQueue<T> {
    fn clone(&self) -> Self {
        TypedQueue {
            queue: self.queue.clone(),
            _data: PhantomData,
        }
    }
}

impl<T> fmt::Debug for TypedQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedQueue")
            .field("queue", &self.queue.name())
            .field("data", &std::any::type_name::<T>())
            .finish()
    }
}

impl Queue {
    /// This queue as a producer of `T` jobs.
    pub fn typed<T: Serialize>(&self) -> TypedQueue<T> {
        TypedQueue {
            queue: self.clone(),
            _data: PhantomData,
        }
    }
}

impl<T: Serialize> TypedQueue<T> {
    /// The untyped handle.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Adds one job (see [`Queue::add`]).
    pub async fn add(&self, name: &str, data: &T, options: JobOptions) -> Result<String> {
        self.queue.add(name, data, options).await
    }

    /// Adds many jobs in one round trip (see [`Queue::add_bulk`]).
    pub async fn add_bulk(
        &self,
        jobs: impl IntoIterator<Item = (String, T, JobOptions)>,
    ) -> Result<Vec<String>> {
        let jobs = jobs
            .into_iter()
            .map(|(name, data, options)| {
                // preserve_order: the Value keeps the struct's field order.
                let data = serde_json::to_value(&data)
                    .map_err(|e| ValidationError::Data(e.to_string()))?;
                Ok(NewJob {
                    name,
                    data,
                    options,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.queue.add_bulk(jobs).await
    }
}

impl<T: DeserializeOwned> TypedQueue<T> {
    /// A job and its data read as `T`; `None` when the job does not exist.
    pub async fn get(&self, id: &str) -> Result<Option<(Job, std::result::Result<T, DataError>)>> {
        Ok(self.queue.get_job(id).await?.map(|job| {
            let data = T::deserialize(&job.data)
                .map_err(|e| DataError::new(id, std::any::type_name::<T>(), e.to_string()));
            (job, data)
        }))
    }
}
