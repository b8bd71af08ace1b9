//! Typed jobs on the worker side: the data read as a Rust type
//! ([`JobContext::data_as`]), and processors written as
//! `async fn(TypedJob<T>) -> Result<R, ProcessError>` ([`typed_processor`]).
//! The stored JSON is untouched: the data is read from the job as stored, and
//! a return value is serialized in its fields' order, as Node writes objects.

use std::any::type_name;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::processor::{JobContext, ProcessError, Processor};

/// The stored data of a job does not fit the type a processor asked for.
///
/// Deliberately not a `std::error::Error`: `?` in a processor turns it into
/// [`ProcessError::Unrecoverable`] (retrying cannot make the data fit), where
/// any `std::error::Error` would become a retried failure. The job's data is
/// left as it was, for whoever looks at the failed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataError {
    job_id: String,
    type_name: &'static str,
    reason: String,
}

impl DataError {
    pub(crate) fn new(job_id: &str, type_name: &'static str, reason: String) -> Self {
        DataError {
            job_id: job_id.to_owned(),
            type_name,
            reason,
        }
    }

    /// The job whose data did not fit.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The Rust type it was read as.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// What serde said (field, expected type, line and column).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the data of job {} does not fit {}: {}",
            self.job_id, self.type_name, self.reason
        )
    }
}

impl From<DataError> for ProcessError {
    fn from(e: DataError) -> Self {
        ProcessError::unrecoverable(e.to_string())
    }
}

impl JobContext {
    /// The job's data read as `T`; a [`DataError`] naming the job, the type
    /// and serde's reason when it does not fit (with `?`, the job fails
    /// unrecoverably).
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<T, DataError> {
        T::deserialize(self.data())
            .map_err(|e| DataError::new(self.id(), type_name::<T>(), e.to_string()))
    }
}

/// A job whose data is a `T`. It dereferences to its [`JobContext`], so
/// `job.update_progress(..)`, `job.log(..)`, `job.id()` and
/// `job.cancelled()` work as on an untyped job; [`TypedJob::data`] is the `T`.
#[derive(Debug)]
pub struct TypedJob<T> {
    data: T,
    ctx: JobContext,
}

impl<T> TypedJob<T> {
    /// The data.
    pub fn data(&self) -> &T {
        &self.data
    }

    /// The context (progress, logs, cancellation).
    pub fn context(&self) -> &JobContext {
        &self.ctx
    }

    /// The data and the context.
    pub fn into_parts(self) -> (T, JobContext) {
        (self.data, self.ctx)
    }
}

impl<T> Deref for TypedJob<T> {
    type Target = JobContext;
    fn deref(&self) -> &JobContext {
        &self.ctx
    }
}

/// A processor from a typed function: the data is read as `T` before `f`
/// runs (a job whose data does not fit fails unrecoverably, `f` not called),
/// and `f`'s `R` is stored as the job's return value.
///
/// ```
/// use echomq::worker::{typed_processor, ProcessError, TypedJob};
/// #[derive(serde::Deserialize)]
/// struct Email { to: String }
/// #[derive(serde::Serialize)]
/// struct Sent { accepted: bool }
/// let p = typed_processor(|job: TypedJob<Email>| async move {
///     let _to = &job.data().to;
///     Ok::<_, ProcessError>(Sent { accepted: true })
/// });
/// # let _ = p;
/// ```
pub fn typed_processor<T, R, F, Fut>(f: F) -> Arc<dyn Processor>
where
    T: DeserializeOwned + Send + 'static,
    R: Serialize,
    F: Fn(TypedJob<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ProcessError>> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: JobContext| {
        let f = f.clone();
        async move {
            let data = ctx.data_as::<T>()?;
            let value = f(TypedJob { data, ctx }).await?;
            serde_json::to_value(&value).map_err(|e| {
                ProcessError::unrecoverable(format!(
                    "the return value ({}) cannot be stored as JSON: {e}",
                    type_name::<R>()
                ))
            })
        }
    })
}
