//! Test support: an EchoMQ worker set (Worker, LockManager, StalledChecker) in
//! its own process, so interop tests can SIGKILL a Rust worker mid-job.
//!
//! `worker_process <redis-url> <queue> <json-options>`, options as
//! `interop/worker.js`: `name`, `concurrency`, `lockDuration`,
//! `stalledInterval`, `maxStalledCount`, `verbose`, `hang`, and
//! `stalledChecker` (default true). Jobs behave as their data says
//! (`echomq_integration_tests::behave`). Prints JSON lines: `ready`, `start`
//! per job when verbose, and `summary` (runs per id) after a clean close,
//! which follows the closing of stdin.

use echomq_integration_tests::NullSupervisor;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{processor_fn, JobContext};
use echomq::{Connection, Queue, WorkerArgs, WorkerMsg, WorkerSetSpec};
use ractor::{call_t, Actor};
use serde_json::{json, Value};

fn say(v: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, queue_name, opts] = &args[..] else {
        eprintln!("usage: worker_process <redis-url> <queue> <json-options>");
        std::process::exit(2);
    };
    let opts: Value = serde_json::from_str(opts).expect("json options");
    let ms = |k: &str, default: u64| Duration::from_millis(opts[k].as_u64().unwrap_or(default));
    let verbose = opts["verbose"].as_bool().unwrap_or(false);
    let hang = opts["hang"].as_bool().unwrap_or(false);

    let conn = Connection::connect_url(url.as_str())
        .await
        .expect("connect");
    let queue = Queue::new(&conn, queue_name).await.expect("queue");
    let runs: Arc<Mutex<HashMap<String, u64>>> = Default::default();
    let r = runs.clone();
    let processor = processor_fn(move |job: JobContext| {
        let r = r.clone();
        async move {
            *r.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            if verbose {
                say(json!({"ev": "start", "id": job.id(), "atm": job.job().attempts_made}));
            }
            if hang {
                std::future::pending::<()>().await;
            }
            echomq_integration_tests::behave(&job).await
        }
    });
    let mut wargs = WorkerArgs::new(queue, processor);
    wargs.options.concurrency = opts["concurrency"].as_u64().unwrap_or(1) as usize;
    wargs.options.name = opts["name"].as_str().map(str::to_owned);
    wargs.options.lock_duration = ms("lockDuration", 30_000);
    wargs.options.stalled_interval = ms("stalledInterval", 30_000);
    wargs.options.max_stalled_count = opts["maxStalledCount"].as_u64().unwrap_or(1);
    wargs.options.drain_delay = Duration::from_secs(1);
    let mut spec = WorkerSetSpec::new(wargs);
    if opts["stalledChecker"] == json!(false) {
        spec.stalled_checker = None;
    }
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.expect("host");
    let set = spec
        .spawn_linked(host.get_cell())
        .await
        .expect("worker set");
    say(json!({"ev": "ready"}));

    // stdin closing is the signal for an orderly close.
    tokio::task::spawn_blocking(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    })
    .await
    .ok();
    let _ = call_t!(set.worker, WorkerMsg::Close, 15_000, Duration::from_secs(5));
    let runs = runs.lock().unwrap().clone();
    say(json!({"ev": "summary", "runs": runs}));
}
