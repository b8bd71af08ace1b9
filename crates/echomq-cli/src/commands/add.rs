//! `echomq add <queue> <name> <json>`: one job.

use echomq::{Backoff, JobOptions};

use super::{Access, Res};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    name: String,
    /// Job data as JSON.
    data: String,
    /// Delay in ms before the job becomes ready.
    #[arg(long)]
    delay: Option<i64>,
    /// Priority, 0 (none) to 2097151; lower runs first.
    #[arg(long)]
    priority: Option<i64>,
    /// Attempts in total (0 or 1: no retry).
    #[arg(long)]
    attempts: Option<i64>,
    /// Backoff between attempts: `fixed:MS` or `exponential:MS`.
    #[arg(long)]
    backoff: Option<String>,
    /// Custom job id (not an integer, no `:`).
    #[arg(long)]
    job_id: Option<String>,
    /// Run before the other waiting jobs.
    #[arg(long)]
    lifo: bool,
    /// Fail an attempt still running after MS ms (EchoMQ workers; retried
    /// while attempts remain).
    #[arg(long, value_name = "MS")]
    timeout: Option<u64>,
    /// Put the job in this group (docs/groups.md): it runs under the
    /// group's concurrency, rate limit and pause, round robin with the others.
    #[arg(long)]
    group: Option<String>,
    /// Priority inside the group (with --group), lower first.
    #[arg(long, requires = "group")]
    group_priority: Option<i64>,
    #[command(flatten)]
    codec: crate::codec::CodecArgs,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let queue = super::queue(t, &a.queue)?.with_codec(a.codec.options()?);
    let data: serde_json::Value =
        serde_json::from_str(&a.data).map_err(|e| format!("job data is not valid JSON: {e}"))?;
    let opts = options(&a)?;
    opts.validate()?;
    queue
        .run(Access::Write, async |_, q| {
            anstream::println!("{}", q.add(&a.name, &data, opts).await?);
            Ok(())
        })
        .await
}

fn options(o: &Args) -> Res<JobOptions> {
    let mut opts = JobOptions {
        delay: o.delay,
        priority: o.priority,
        lifo: o.lifo,
        job_id: o.job_id.clone(),
        attempts: o.attempts,
        timeout: o.timeout,
        group: o.group.as_ref().map(|id| echomq::groups::GroupOptions {
            id: id.clone(),
            priority: o.group_priority,
        }),
        ..Default::default()
    };
    if let Some(b) = &o.backoff {
        let (kind, ms) = b
            .split_once(':')
            .ok_or("--backoff takes fixed:MS or exponential:MS")?;
        let delay: u64 = ms
            .parse()
            .map_err(|_| format!("--backoff delay {ms:?} is not a number of ms"))?;
        opts.backoff = Some(match kind {
            "fixed" => Backoff::Fixed {
                delay,
                jitter: None,
            },
            "exponential" => Backoff::Exponential {
                delay,
                jitter: None,
            },
            other => {
                return Err(format!("unknown backoff type {other:?} (fixed or exponential)").into())
            }
        });
    }
    Ok(opts)
}
