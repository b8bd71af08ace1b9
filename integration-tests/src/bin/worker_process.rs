//! Test support: an EchoMQ worker set (Worker, LockManager, StalledChecker) in
//! its own process, so interop and chaos tests can SIGKILL, SIGSTOP or
//! SIGTERM a Rust worker mid-job.
//!
//! `worker_process <redis-url> <queue> <json-options>`, options as
//! `interop/worker.js`: `name`, `concurrency`, `lockDuration`,
//! `stalledInterval`, `maxStalledCount`, `drainDelay`, `verbose`, `hang`, and
//! `stalledChecker` (default true), `deadLetter` (the dead-letter queue), `batch` (take batches of up to this many
//! jobs, BatchOptions::new, each job run as below); for the chaos runner also `threads` (the
//! runtime's worker threads, default 2), `skewMs` (this process's clock runs
//! that far ahead, or behind when negative) and `closeMs` (the close deadline
//! on SIGTERM or end of stdin, default 5000); for the network-fault rows
//! `commandTimeoutMs`, `connectTimeoutMs` (the connection's, default 10 s
//! each), `watchdogMs` (the Worker's watchdog, default 5 s) and `healthAddr`:
//! the worker set then runs under the shipped `HostSupervisor`, as `echomq
//! work` runs it, and `/livez` and `/readyz` are served on that address (the
//! `ready` line carries the bound address as `health`).
//!
//! Jobs behave as their data says (`echomq_integration_tests::behave`), plus
//! the chaos modes: `panic`, `abort` (the whole process, a crash loop when a
//! supervisor restarts it) and `block` (`std::thread::sleep(ms)` inside the
//! processor, starving the runtime; with `"first": true` only on the first
//! attempt). Prints JSON lines: `ready`, `start` per job when verbose, and
//! `summary` (runs per id) after a clean close, which follows the closing of
//! stdin or SIGTERM.

use echomq_integration_tests::NullSupervisor;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::health::HealthCheck;
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    Connection, ConnectionConfig, HostSupervisor, HostSupervisorMsg, Queue, RestartIntensity,
    WorkerArgs, WorkerMsg, WorkerSetSpec,
};
use ractor::{call_t, Actor};
use serde_json::{json, Value};

fn say(v: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, queue_name, opts] = &args[..] else {
        eprintln!("usage: worker_process <redis-url> <queue> <json-options>");
        std::process::exit(2);
    };
    let opts: Value = serde_json::from_str(opts).expect("json options");
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let threads = opts["threads"].as_u64().unwrap_or(2).max(1) as usize;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run(url.clone(), queue_name.clone(), opts));
}

async fn run(url: String, queue_name: String, opts: Value) {
    let ms = |k: &str, default: u64| Duration::from_millis(opts[k].as_u64().unwrap_or(default));
    let verbose = opts["verbose"].as_bool().unwrap_or(false);
    let hang = opts["hang"].as_bool().unwrap_or(false);
    if let Some(skew) = opts["skewMs"].as_i64() {
        echomq::clock::set_skew_ms(skew);
    }

    let mut config = ConnectionConfig::with_url(url.as_str());
    if opts["commandTimeoutMs"].is_u64() {
        config.command_timeout = ms("commandTimeoutMs", 0);
    }
    if opts["connectTimeoutMs"].is_u64() {
        config.connect_timeout = ms("connectTimeoutMs", 0);
    }
    let conn = Connection::connect(config).await.expect("connect");
    let queue = Queue::new(&conn, &queue_name).await.expect("queue");
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
            let d = job.data();
            let first = job.attempt() == 1 || !d["first"].as_bool().unwrap_or(false);
            match d["mode"].as_str() {
                Some("panic") => panic!("chaos: a poison job panics"),
                Some("abort") => std::process::abort(),
                Some("block") if first => {
                    std::thread::sleep(Duration::from_millis(d["ms"].as_u64().unwrap_or(0)));
                    Ok(d.get("ret").cloned().unwrap_or(Value::Null))
                }
                Some("block") => Ok(d.get("ret").cloned().unwrap_or(Value::Null)),
                _ => echomq_integration_tests::behave(&job).await,
            }
        }
    });
    let mut wargs = match opts["batch"].as_u64() {
        Some(size) => WorkerArgs::batched(
            queue,
            echomq::worker::each_job(processor),
            echomq::worker::BatchOptions::new(size as usize),
        ),
        None => WorkerArgs::new(queue, processor),
    };
    wargs.options.concurrency = opts["concurrency"].as_u64().unwrap_or(1) as usize;
    wargs.options.name = opts["name"].as_str().map(str::to_owned);
    wargs.options.lock_duration = ms("lockDuration", 30_000);
    wargs.options.stalled_interval = ms("stalledInterval", 30_000);
    wargs.options.max_stalled_count = opts["maxStalledCount"].as_u64().unwrap_or(1);
    wargs.options.drain_delay = ms("drainDelay", 1000);
    if let Some(dlq) = opts["deadLetter"].as_str() {
        wargs.options.dead_letter = Some(echomq::dead_letter::DeadLetterQueue::new(dlq));
    }
    if opts["watchdogMs"].is_u64() {
        wargs.options.watchdog_interval = ms("watchdogMs", 0);
    }
    let mut spec = WorkerSetSpec::new(wargs);
    if opts["stalledChecker"] == json!(false) {
        spec.stalled_checker = None;
    }
    // Kept alive until the exit: dropping it stops the endpoints.
    let mut _health = None;
    let set = match opts["healthAddr"].as_str() {
        Some(addr) => {
            let addr: std::net::SocketAddr = addr.parse().expect("healthAddr is host:port");
            let (host, _) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
                .await
                .expect("host supervisor");
            let (id, set) = call_t!(host, HostSupervisorMsg::AddWorkerSet, 5000, Box::new(spec))
                .expect("supervisor answers")
                .expect("worker set");
            let check = HealthCheck::new(conn.clone(), host).worker_set(id);
            let server = echomq::health::serve(addr, Some(check))
                .await
                .expect("health endpoints");
            let bound = server.addr();
            _health = Some(server);
            say(json!({"ev": "ready", "health": bound.to_string()}));
            set
        }
        None => {
            let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.expect("host");
            let set = spec
                .spawn_linked(host.get_cell())
                .await
                .expect("worker set");
            say(json!({"ev": "ready"}));
            set
        }
    };

    // stdin closing or SIGTERM is the signal for an orderly close.
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = stdin_closed => {}
        _ = term.recv() => {}
    }
    let deadline = ms("closeMs", 5000);
    let report = call_t!(
        set.worker,
        WorkerMsg::Close,
        deadline.as_millis() as u64 + 10_000,
        deadline
    );
    let moved_back = report.map(|r| r.moved_back).unwrap_or_default();
    let runs = runs.lock().unwrap().clone();
    say(json!({"ev": "summary", "runs": runs, "movedBack": moved_back}));
    std::process::exit(0);
}
