//! `echomq flow <queue> <id>`: the flow below a job, with states and return
//! values.

use echomq::{queue::FlowNode, JobState};

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    id: String,
    /// Levels, counting the job's own (BullMQ's getFlow depth).
    #[arg(long, default_value_t = 10)]
    depth: u32,
    /// Children read per group of each parent.
    #[arg(long, default_value_t = 20)]
    max_children: u64,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let id = &a.id;
    super::queue(t, &a.queue)?
        .run(Access::Read, async |_, q| {
            let Some(node) = q.flows().get_flow(id, a.depth, a.max_children).await? else {
                return Err(format!("job {id} not found").into());
            };
            print_node(&node, 0);
            Ok(())
        })
        .await
}

fn state_style(s: JobState) -> anstyle::Style {
    match s {
        JobState::Completed => style::GOOD,
        JobState::Failed => style::BAD,
        JobState::Active => style::INFO,
        JobState::WaitingChildren | JobState::Delayed => style::WARN,
        _ => style::DIM,
    }
}

/// The state as BullMQ names it (`waiting`, not the list's name `wait`).
fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Waiting => "waiting",
        other => other.key_suffix(),
    }
}

fn print_node(n: &FlowNode, depth: usize) {
    let value = n
        .job
        .return_value
        .as_ref()
        .map(|v| format!(" = {v}"))
        .unwrap_or_default();
    anstream::println!(
        "{}{} {} {} {}{}",
        "  ".repeat(depth),
        paint(style::BOLD, &n.job.id),
        n.job.name,
        paint(style::DIM, format!("({})", n.queue)),
        paint(state_style(n.state), state_name(n.state)),
        value
    );
    for c in &n.children {
        print_node(c, depth + 1);
    }
}
