//! `echomq clean <queue> <state>`: jobs of a state older than `--grace`
//! deleted in chunks; resumable by running it again.

use std::time::Duration;

use echomq::queue::DEFAULT_CHUNK;

use super::{Access, Res, StateArg};
use crate::chunked;
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    state: StateArg,
    #[arg(long, default_value_t = 0)]
    grace: u64,
    #[arg(long, default_value_t = 1000)]
    limit: u64,
    /// Jobs per call.
    #[arg(long, default_value_t = DEFAULT_CHUNK)]
    chunk: u64,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Write, async |_, q| {
            let (bar, tick) = chunked::bar("cleaning");
            let grace = Duration::from_millis(a.grace);
            let n = q
                .chunked(a.chunk)
                .on_progress(tick)
                .clean(grace, a.state.into(), a.limit)
                .await
                .map_err(|e| chunked::stopped(&bar, "clean", e))?;
            bar.finish_and_clear();
            anstream::println!("cleaned {n}");
            Ok(())
        })
        .await
}
