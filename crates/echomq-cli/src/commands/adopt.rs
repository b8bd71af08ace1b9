//! `echomq adopt <queue> [--apply] [--json]`: what a queue a BullMQ fleet
//! already runs holds that matters once EchoMQ joins it, and with `--apply`
//! the conversion of BullMQ <= 4's legacy repeatable jobs into job schedulers
//! (`echomq::adopt`, docs/migrating.md). Without `--apply` nothing is written.
//!
//! Exit codes: 0 done (or nothing to do); 2 the queue was refused (not
//! found, a key of another type or of unknown shape) and nothing was
//! written; other failures go back to the caller for `diagnose`.

use echomq::adopt::{self, AdoptError, AdoptReport, IterationState, LegacyRepeat};
use echomq::{Connection, Error};
use serde_json::json;

use crate::style::{paint, BAD, BOLD, DIM, GOOD, WARN};
use crate::target::Target;

/// The arguments of `echomq adopt`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AdoptArgs {
    /// The queue (under the global `--prefix`: BullMQ's default is `bull`).
    pub queue: String,
    /// Convert each legacy repeatable job into a job scheduler (one atomic
    /// call each; safe to run again, and to re-run after an interruption).
    #[arg(long)]
    pub apply: bool,
    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command against the target: its own connection and no `Queue`
/// (opening one writes the queue's meta hash; adopt writes only with
/// `--apply`). Answers the process exit code.
pub(crate) async fn run(args: AdoptArgs, t: &Target) -> i32 {
    let conn = match Connection::connect(t.config.clone()).await {
        Ok(conn) => conn,
        Err(e) => return failed(&e, t),
    };
    let code = report(&args, &conn, &t.prefix).await;
    conn.close().await;
    match code {
        Ok(code) => code,
        Err(e) => failed(&e, t),
    }
}

fn failed(e: &Error, t: &Target) -> i32 {
    let d = echomq_cli::diagnose::diagnose(e, Some(&t.url));
    crate::style::print_error(&d.message);
    d.class.exit_code()
}

/// Prints the report (or applies and prints); the exit code.
async fn report(args: &AdoptArgs, conn: &Connection, prefix: &str) -> Result<i32, Error> {
    let result = if args.apply {
        adopt::apply(conn, &args.queue).await
    } else {
        adopt::inspect(conn, &args.queue).await
    };
    let report = match result {
        Ok(r) => r,
        Err(Error::Adopt(e)) => {
            refusal(args, prefix, &e);
            return Ok(2);
        }
        Err(e) => return Err(e),
    };
    if args.json {
        anstream::println!("{}", to_json(&report));
    } else {
        print(&report, args.apply);
    }
    if let Some(e) = report.blocked() {
        refusal(args, prefix, &e);
        return Ok(2);
    }
    Ok(0)
}

fn refusal(args: &AdoptArgs, prefix: &str, e: &AdoptError) {
    if args.json {
        anstream::println!(
            "{}",
            json!({"queue": args.queue, "prefix": prefix, "refused": e.to_string(), "written": false})
        );
    }
    anstream::eprintln!(
        "{} {e} (prefix {prefix:?}, queue {:?}; nothing was written)",
        paint(BAD, "adopt refused:"),
        args.queue
    );
}

fn repeat_text(r: &LegacyRepeat) -> String {
    match r {
        LegacyRepeat::Cron(p) => format!("cron {p:?}"),
        LegacyRepeat::Every(ms) => format!("every {ms} ms"),
    }
}

fn print(r: &AdoptReport, applied: bool) {
    anstream::println!(
        "{} {}:{} — meta version {}",
        paint(BOLD, "queue"),
        r.prefix,
        r.queue,
        r.version.as_deref().unwrap_or("(none)")
    );
    anstream::println!(
        "{} keys walked{}; {} job scheduler(s) or BullMQ 5 repeatable(s)",
        r.keys_seen,
        if r.walk_complete {
            ""
        } else {
            " (walk stopped at its bound)"
        },
        r.schedulers
    );
    if r.unknown_keys > 0 {
        anstream::println!(
            "{} {} key(s) of unknown shape: {}",
            paint(WARN, "!"),
            r.unknown_keys,
            r.unknown_sample.join(", ")
        );
    }
    if r.legacy.is_empty() {
        anstream::println!("{} no legacy repeatable jobs", paint(GOOD, "ok"));
        return;
    }
    anstream::println!(
        "{} legacy repeatable job(s) (BullMQ <= 4; BullMQ 6 refuses them, EchoMQ cannot continue them):",
        r.legacy.len()
    );
    for e in &r.legacy {
        let state = match e.iteration {
            IterationState::Pending => "pending",
            IterationState::Taken => "taken",
            IterationState::Gone => "gone",
        };
        anstream::println!(
            "  {:?} name {:?} {}{} next {} (iteration {} {state}) → scheduler {}",
            e.key.member,
            e.key.name,
            repeat_text(&e.key.repeat),
            e.key
                .tz
                .as_deref()
                .map(|t| format!(" tz {t}"))
                .unwrap_or_default(),
            e.next_millis,
            e.iteration_id,
            e.scheduler_id
        );
    }
    if applied {
        for c in &r.converted {
            anstream::println!(
                "  {} {:?} → {} ({:?}{})",
                paint(GOOD, "converted"),
                c.member,
                c.scheduler_id,
                c.outcome,
                c.created
                    .as_deref()
                    .map(|id| format!(", next iteration {id}"))
                    .unwrap_or_default()
            );
        }
    } else {
        anstream::println!("{}", paint(DIM, "run again with --apply to convert them"));
    }
}

fn to_json(r: &AdoptReport) -> serde_json::Value {
    let legacy: Vec<_> = r
        .legacy
        .iter()
        .map(|e| {
            let (pattern, every) = match &e.key.repeat {
                LegacyRepeat::Cron(p) => (Some(p.clone()), None),
                LegacyRepeat::Every(ms) => (None, Some(*ms)),
            };
            json!({
                "member": e.key.member, "name": e.key.name, "pattern": pattern, "every": every,
                "tz": e.key.tz, "endDate": e.key.end_date, "next": e.next_millis,
                "iteration": e.iteration_id, "iterationState": format!("{:?}", e.iteration),
                "schedulerId": e.scheduler_id,
            })
        })
        .collect();
    let converted: Vec<_> = r
        .converted
        .iter()
        .map(|c| json!({"member": c.member, "schedulerId": c.scheduler_id, "outcome": format!("{:?}", c.outcome), "created": c.created}))
        .collect();
    json!({
        "prefix": r.prefix, "queue": r.queue, "version": r.version, "legacy": legacy,
        "schedulers": r.schedulers, "keysSeen": r.keys_seen, "walkComplete": r.walk_complete,
        "unknownKeys": r.unknown_keys, "unknownSample": r.unknown_sample, "converted": converted,
    })
}
