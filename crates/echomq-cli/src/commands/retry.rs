//! `echomq retry <queue> [<id> | --all]`: a failed (or completed) job again,
//! or every failed job in chunks.

use echomq::queue::DEFAULT_CHUNK;

use super::{Access, Res};
use crate::chunked;
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    id: Option<String>,
    #[arg(long)]
    all: bool,
    #[arg(long, default_value_t = DEFAULT_CHUNK)]
    count: u64,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let queue = super::queue(t, &a.queue)?;
    if a.id.is_none() && !a.all {
        return Err("give a job id or --all".into());
    }
    queue
        .run(Access::Write, async |_, q| match a.id {
            Some(id) => Ok(q.retry_job(&id, false).await?),
            None => {
                let (bar, tick) = chunked::bar("retrying");
                let n = q
                    .chunked(a.count)
                    .on_progress(tick)
                    .retry_jobs(echomq::protocol::FinishTarget::Failed, None)
                    .await
                    .map_err(|e| chunked::stopped(&bar, "retry", e))?;
                bar.finish_and_clear();
                anstream::println!("retried {n}");
                Ok(())
            }
        })
        .await
}
