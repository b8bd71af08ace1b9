//! `echomq promote <queue> [<id> | --all]`: a delayed job now, or every
//! delayed job in chunks.

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
            Some(id) => Ok(q.promote(&id).await?),
            None => {
                let (bar, tick) = chunked::bar("promoting");
                let n = q
                    .chunked(a.count)
                    .on_progress(tick)
                    .promote_all()
                    .await
                    .map_err(|e| chunked::stopped(&bar, "promote", e))?;
                bar.finish_and_clear();
                anstream::println!("promoted {n}");
                Ok(())
            }
        })
        .await
}
