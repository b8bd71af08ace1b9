//! `echomq job <queue> <id>`: every field of one job, its dependencies and
//! its logs.

use std::collections::HashMap;

use echomq::{Connection, Queue};

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    id: String,
    /// Keys to show the decoded data of an encrypted payload with.
    #[command(flatten)]
    keys: crate::codec::KeyArgs,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .with_codec(a.keys.options()?)
        .run(Access::Read, async |conn, q| show_job(conn, q, &a.id).await)
        .await
}

async fn show_job(conn: &Connection, q: &Queue, id: &str) -> Res {
    let Some(job) = q.get_job(id).await? else {
        return Err(format!("job {id} not found").into());
    };
    let state = q.get_job_state(id).await?;
    anstream::println!("{} {}  {:?}", paint(style::BOLD, "job"), job.id, state);
    // From the delayed score: a deduplicated add with `reschedule` moves it
    // without touching `timestamp`.
    if let Some(due) = q.get_due_time(id).await? {
        anstream::println!("  {:<13}{due}", "due");
    }
    let raw: HashMap<String, String> =
        fred::prelude::HashesInterface::hgetall(conn.pool(), q.keys().job(id)).await?;
    let mut fields: Vec<_> = raw.into_iter().collect();
    fields.sort();
    for (k, v) in fields {
        anstream::println!("  {k:<13}{v}");
    }
    show_decoded("data", Some(&job.data), q).await;
    show_decoded("returnvalue", job.return_value.as_ref(), q).await;
    show_dependencies(q, id).await?;
    let logs = q
        .get_job_logs(id, 0, -1, echomq::RangeOrder::Ascending)
        .await?
        .logs;
    if !logs.is_empty() {
        anstream::println!("{}", paint(style::BOLD, "logs"));
        for l in logs {
            anstream::println!("  {l}");
        }
    }
    Ok(())
}

/// A payload stored through a codec, decoded when the keys allow, else why
/// not (docs/operations.md §Memory).
async fn show_decoded(field: &str, value: Option<&serde_json::Value>, q: &Queue) {
    let Some(value) = value else { return };
    let Some(decoded) = q.codec().load(value).await else {
        return;
    };
    let codec = value[echomq::codec::CODEC_FIELD].as_str().unwrap_or("?");
    let label = format!("{field} ({codec}, decoded)");
    match decoded {
        Ok(plain) => anstream::println!("  {}  {plain}", paint(style::BOLD, label)),
        Err(e) => anstream::println!(
            "  {}  {}",
            paint(style::BOLD, format!("{field} ({codec})")),
            paint(style::WARN, format!("not decoded: {e}"))
        ),
    }
}

/// The dependencies section: counts and the first children of each group
/// (nothing for a job that never had children).
async fn show_dependencies(q: &Queue, id: &str) -> Res {
    let d = q.flows().get_dependencies(id, 0, 20).await?;
    let c = d.counts;
    if c.processed + c.unprocessed + c.ignored + c.failed == 0 {
        return Ok(());
    }
    anstream::println!(
        "{}  processed {}  pending {}  ignored {}  failed {}",
        paint(style::BOLD, "dependencies"),
        c.processed,
        c.unprocessed,
        c.ignored,
        c.failed
    );
    for (k, v) in &d.processed {
        anstream::println!("  {} {k} = {v}", paint(style::GOOD, "done   "));
    }
    for k in &d.unprocessed {
        anstream::println!("  {} {k}", paint(style::DIM, "pending"));
    }
    for (k, why) in &d.ignored {
        anstream::println!("  {} {k}: {why}", paint(style::WARN, "ignored"));
    }
    for k in &d.failed {
        anstream::println!("  {} {k}", paint(style::BAD, "failed "));
    }
    Ok(())
}
