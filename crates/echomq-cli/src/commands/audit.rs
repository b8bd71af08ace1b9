//! `echomq audit <queue>`: the read-only consistency audit; exits 1 on a
//! hard violation.

use echomq::{Connection, Queue};

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Read, async |conn, q| audit(conn, q).await)
        .await
}

async fn audit(conn: &Connection, q: &Queue) -> Res {
    // One bounded read per call (docs/stalled-checker.md §Audit); the bar
    // says where it is on a terminal.
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("auditing {msg} {bar:30} {pos}/{len} ids")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = echomq::audit::Audit::new(conn, q.name())
        .on_progress(|p| {
            bar.set_length(p.ids_total.max(p.ids_read));
            bar.set_position(p.ids_read);
            bar.set_message(format!("{} ({} calls)", p.phase, p.calls));
        })
        .run()
        .await;
    bar.finish_and_clear();
    let report = report?;
    for v in &report.violations {
        let s = if v.hard { style::BAD } else { style::WARN };
        anstream::println!(
            "{} {} {}",
            paint(s, &v.check),
            v.job_id.as_deref().unwrap_or("-"),
            v.detail
        );
    }
    anstream::println!(
        "audit of {}: {} ids, {} violations ({} hard), {} calls",
        q.name(),
        report.ids,
        report.violations.len(),
        report.hard_count(),
        report.calls
    );
    if report.hard_count() > 0 {
        return Err("hard invariant violations found".into());
    }
    Ok(())
}
