//! `echomq remove <queue> <id>`: a job, and its children unless kept.

use echomq::queue::RemoveOutcome;

use super::{Access, Res};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    id: String,
    #[arg(long)]
    keep_children: bool,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let id = &a.id;
    super::queue(t, &a.queue)?
        .run(Access::Write, async |_, q| {
            match q.remove(id, !a.keep_children).await? {
                RemoveOutcome::Removed => println!("removed {id}"),
                RemoveOutcome::Locked => {
                    return Err(format!("job {id} is locked by a worker; nothing removed").into())
                }
            }
            Ok(())
        })
        .await
}
