//! What the queue-wide commands that work in chunks share (`drain`, `clean`,
//! `retry --all`, `promote --all`, `obliterate`): a progress bar on a
//! terminal while the calls go, and the line that says how to go on when
//! one stops half way. Each is resumable by running it again: what is left
//! is what it works on.

use echomq::queue::Progress;
use indicatif::{ProgressBar, ProgressStyle};

/// A bar for `what` (hidden when stderr is not a terminal) and the callback
/// that moves it.
pub(crate) fn bar(what: &'static str) -> (ProgressBar, impl FnMut(Progress) + Clone) {
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
pub(crate) fn stopped(
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
