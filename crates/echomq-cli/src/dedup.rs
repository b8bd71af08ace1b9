//! `echomq dedup`: the owner of a deduplication id, and freeing it.

use clap::Subcommand;
use echomq::Queue;

use crate::style::{self, paint};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `dedup <queue> …`
#[derive(Debug, Clone, Subcommand)]
pub enum DedupAction {
    /// The job that owns a deduplication id.
    Show { id: String },
    /// Free a deduplication id whoever owns it.
    Remove { id: String },
}

/// Whether the action only reads.
pub fn dedup_reads_only(a: &DedupAction) -> bool {
    matches!(a, DedupAction::Show { .. })
}

pub async fn dedup(q: &Queue, action: DedupAction) -> Res {
    match action {
        DedupAction::Show { id } => match q.get_deduplication_job_id(&id).await? {
            Some(job) => anstream::println!("{job}"),
            None => anstream::println!("{}", paint(style::DIM, "no owner")),
        },
        DedupAction::Remove { id } => {
            let removed = q.remove_deduplication_key(&id).await?;
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
