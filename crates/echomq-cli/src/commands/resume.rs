//! `echomq resume <queue>`.

use super::{Access, Res};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Write, async |_, q| Ok(q.resume().await?))
        .await
}
