//! `echomq cancel <queue> <id>`: stops a running job or removes a waiting one.

use echomq::queue::{CancelMode, CancelOutcome};
use echomq::Queue;

use super::{Access, Res};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    id: String,
    /// Why, stored as the failure reason.
    #[arg(long, default_value = "cancelled")]
    reason: String,
    /// Count the attempt and retry the job if attempts remain, instead of failing it for good.
    #[arg(long)]
    retry: bool,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Write, async |_, q| {
            cancel(q, &a.id, &a.reason, a.retry).await
        })
        .await
}

async fn cancel(q: &Queue, id: &str, reason: &str, retry: bool) -> Res {
    let mode = if retry {
        CancelMode::Retry
    } else {
        CancelMode::Fail
    };
    match q.cancel(id, reason, mode).await? {
        CancelOutcome::Stopped { retrying: true } => {
            anstream::println!("job {id} stopped; it will run again (attempts remain)")
        }
        CancelOutcome::Stopped { retrying: false } => {
            anstream::println!("job {id} stopped and failed: {reason}")
        }
        CancelOutcome::Removed => anstream::println!("job {id} had not started; removed"),
        CancelOutcome::AlreadyFinished(state) => {
            anstream::println!("job {id} had already finished ({state:?}); nothing changed")
        }
        CancelOutcome::NotFound => return Err(format!("job {id} not found").into()),
        other => anstream::println!("job {id}: {other:?}"),
    }
    Ok(())
}
