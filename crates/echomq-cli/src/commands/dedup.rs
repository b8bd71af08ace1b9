//! `echomq dedup <queue> …`: the owner of a deduplication id, and freeing it.

use clap::Subcommand;
use echomq::Queue;

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    #[command(subcommand)]
    action: Action,
}

/// `dedup <queue> …`
#[derive(Debug, Clone, Subcommand)]
enum Action {
    /// The job that owns a deduplication id.
    Show { id: String },
    /// Free a deduplication id whoever owns it.
    Remove { id: String },
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let access = match a.action {
        Action::Show { .. } => Access::Read,
        Action::Remove { .. } => Access::Write,
    };
    super::queue(t, &a.queue)?
        .run(access, async |_, q| dedup(q, a.action).await)
        .await
}

async fn dedup(q: &Queue, action: Action) -> Res {
    match action {
        Action::Show { id } => match q.dedup().get_deduplication_job_id(&id).await? {
            Some(job) => anstream::println!("{job}"),
            None => anstream::println!("{}", paint(style::DIM, "no owner")),
        },
        Action::Remove { id } => {
            let removed = q.dedup().remove_deduplication_key(&id).await?;
            anstream::println!(
                "{}",
                if removed {
                    "deduplication id freed"
                } else {
                    "no such deduplication id"
                }
            );
        }
    }
    Ok(())
}
