//! `echomq drain <queue> [--delayed]`: waiting (and delayed) jobs removed in
//! chunks; resumable by running it again.

use echomq::queue::DEFAULT_CHUNK;

use super::{Access, Res};
use crate::chunked;
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    #[arg(long)]
    delayed: bool,
    /// Jobs per call.
    #[arg(long, default_value_t = DEFAULT_CHUNK)]
    chunk: u64,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Write, async |_, q| {
            let (bar, tick) = chunked::bar("draining");
            let n = q
                .chunked(a.chunk)
                .on_progress(tick)
                .drain(a.delayed)
                .await
                .map_err(|e| chunked::stopped(&bar, "drain", e))?;
            bar.finish_and_clear();
            anstream::println!("drained {n} jobs");
            Ok(())
        })
        .await
}
