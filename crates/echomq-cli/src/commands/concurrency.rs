//! `echomq concurrency <queue> …`: the queue-wide concurrency. Bad values
//! are refused by the argument parser, before anything connects or writes.

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

/// `concurrency <queue> …`
#[derive(Debug, Clone, Subcommand)]
enum Action {
    /// The global concurrency and whether it is used up.
    Show,
    /// Set the global concurrency (at least 1).
    Set {
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        concurrency: u64,
    },
    /// Remove the global concurrency.
    Remove,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let access = match a.action {
        Action::Show => Access::Read,
        _ => Access::Write,
    };
    super::queue(t, &a.queue)?
        .run(access, async |_, q| concurrency(q, a.action).await)
        .await
}

async fn concurrency(q: &Queue, action: Action) -> Res {
    match action {
        Action::Show => {
            match q.limits().get_global_concurrency().await? {
                Some(n) => anstream::println!("global concurrency  {n}"),
                None => anstream::println!("global concurrency  {}", paint(style::DIM, "none")),
            }
            anstream::println!("maxed               {}", q.limits().is_maxed().await?);
        }
        Action::Set { concurrency } => {
            q.limits().set_global_concurrency(concurrency).await?;
            anstream::println!("global concurrency set to {concurrency}");
        }
        Action::Remove => {
            q.limits().remove_global_concurrency().await?;
            anstream::println!("global concurrency removed");
        }
    }
    Ok(())
}
