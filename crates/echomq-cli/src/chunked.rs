//! The queue-wide commands that work in chunks (`drain`, `clean`,
//! `retry --all`, `promote --all`, `obliterate`): a progress bar on a
//! terminal while the calls go, one summary line at the end. Each is
//! resumable by running it again: what is left is what it works on.

use std::time::Duration;

use echomq::queue::Progress;
use echomq::{JobState, Queue};
use indicatif::{ProgressBar, ProgressStyle};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A bar for `what` (hidden when stderr is not a terminal) and the callback
/// that moves it.
fn bar(what: &'static str) -> (ProgressBar, impl FnMut(Progress) + Clone) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} jobs  {{per_sec}}  eta {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    (bar, move |p: Progress| {
        b.set_length(p.total.max(p.done));
        b.set_position(p.done);
    })
}

/// How a chunked command ended when it failed half way: what was done, and
/// that running it again goes on.
fn stopped(
    bar: &ProgressBar,
    what: &str,
    e: echomq::Error,
) -> Box<dyn std::error::Error + Send + Sync> {
    bar.abandon();
    crate::style::print_warning(&format!(
        "{what} stopped after {} jobs; run the same command again to go on with the rest",
        bar.position()
    ));
    Box::new(e)
}

/// `echomq drain [--delayed]`.
pub async fn drain(q: &Queue, delayed: bool, chunk: u64) -> Res {
    let (bar, tick) = bar("draining");
    let n = q
        .drain_chunked(delayed, chunk, tick)
        .await
        .map_err(|e| stopped(&bar, "drain", e))?;
    bar.finish_and_clear();
    anstream::println!("drained {n} jobs");
    Ok(())
}

/// `echomq clean <state> --grace MS --limit N`.
pub async fn clean(q: &Queue, state: JobState, grace: u64, limit: u64, chunk: u64) -> Res {
    let (bar, tick) = bar("cleaning");
    let n = q
        .clean_chunked(Duration::from_millis(grace), state, limit, chunk, tick)
        .await
        .map_err(|e| stopped(&bar, "clean", e))?;
    bar.finish_and_clear();
    anstream::println!("cleaned {n}");
    Ok(())
}

/// `echomq retry --all`.
pub async fn retry_all(q: &Queue, count: u64) -> Res {
    let (bar, tick) = bar("retrying");
    let n = q
        .retry_jobs_with(echomq::protocol::FinishTarget::Failed, count, None, tick)
        .await
        .map_err(|e| stopped(&bar, "retry", e))?;
    bar.finish_and_clear();
    anstream::println!("retried {n}");
    Ok(())
}

/// `echomq promote --all`.
pub async fn promote_all(q: &Queue, count: u64) -> Res {
    let (bar, tick) = bar("promoting");
    let n = q
        .promote_all_with(count, tick)
        .await
        .map_err(|e| stopped(&bar, "promote", e))?;
    bar.finish_and_clear();
    anstream::println!("promoted {n}");
    Ok(())
}

/// `echomq obliterate [--force]`.
pub async fn obliterate(q: &Queue, force: bool, chunk: u32) -> Res {
    let (bar, tick) = bar("obliterating");
    q.obliterate_with(force, chunk, tick)
        .await
        .map_err(|e| stopped(&bar, "obliterate", e))?;
    bar.finish_and_clear();
    anstream::println!("obliterated {}", q.name());
    Ok(())
}
