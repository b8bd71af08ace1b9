//! `echomq blobs <queue> --offload STORE [--grace SECS] [--page N]`: deletes
//! the offloaded payloads no job of the queue uses any more, a bounded page
//! per call, until none is due (docs/operations.md §Memory). `echomq work
//! --offload` runs the same sweep every minute.

use std::time::Duration;

use super::{Access, Res};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    #[command(flatten)]
    offload: crate::codec::OffloadArgs,
    /// Seconds a blob is left alone after it was written or last found in
    /// use: longer than any add takes.
    #[arg(long, default_value_t = 3600)]
    grace: u64,
    /// Blobs read per call (1 to 1000).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=1000))]
    page: u64,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let Some(offload) = a.offload.options()? else {
        return Err("--offload (or ECHOMQ_OFFLOAD) names the blob store to sweep".into());
    };
    let codec = echomq::codec::CodecOptions::default().offload(Some(offload));
    super::queue(t, &a.queue)?
        .with_codec(codec)
        .run(Access::Read, async |_, q| {
            let (mut examined, mut deleted) = (0, 0);
            loop {
                let sweep = q
                    .collect_blobs(Duration::from_secs(a.grace), a.page)
                    .await?;
                examined += sweep.examined;
                deleted += sweep.deleted;
                if (sweep.examined as u64) < a.page {
                    break;
                }
            }
            anstream::println!("examined {examined} blobs, deleted {deleted}");
            Ok(())
        })
        .await
}
