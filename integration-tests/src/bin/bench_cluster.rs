//! `just bench-cluster`: jobs/s and Redis CPU per primary with N queues on a
//! real Redis Cluster (3 primaries + 3 replicas), all queues on one primary
//! against the same queues spread over the three. Printed as Markdown for
//! docs/benchmarks.md.
//!
//! Each placement adds `BENCH_JOBS` jobs (default 3000, scaled by
//! `BENCH_SCALE`) to each of `BENCH_QUEUES` queues (default 6) with
//! `add_bulk`, then runs one worker tree per queue in this process
//! (concurrency 8, a processor that returns at once) until every job is
//! completed. Redis CPU is `used_cpu_user + used_cpu_sys` of each primary's
//! `INFO cpu`, read around each section; this process's CPU is getrusage.
//! Speed lives here, never in tests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use echomq::worker::processor_fn;
use echomq::{
    Connection, ConnectionConfig, JobOptions, NewJob, Queue, WorkerArgs, WorkerOptions,
    WorkerSetSpec,
};
use echomq_integration_tests::cluster::RedisCluster;
use echomq_integration_tests::NullSupervisor;
use ractor::Actor;
use serde_json::json;

/// This process's CPU time (user + system), seconds.
fn own_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// CPU seconds each primary has used so far.
fn primaries_cpu(cluster: &RedisCluster, primaries: &[u16]) -> BTreeMap<u16, f64> {
    primaries
        .iter()
        .map(|&p| {
            let info = cluster.cli(p, &["INFO", "cpu"]);
            let field = |name: &str| -> f64 {
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            (p, field("used_cpu_user") + field("used_cpu_sys"))
        })
        .collect()
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` hash-tagged queue names, tagged `tag`, placed by `pick` on primaries.
fn names(cluster: &RedisCluster, tag: &str, n: usize, pick: impl Fn(usize) -> u16) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0.. {
        let name = format!("{{{tag}{i}}}");
        if cluster.primary_of(&format!("emq:{name}:wait")) == pick(out.len()) {
            out.push(name);
            if out.len() == n {
                return out;
            }
        }
    }
    unreachable!()
}

/// What one placement measured.
struct Run {
    label: String,
    adds_per_s: f64,
    jobs_per_s: f64,
    /// Redis CPU seconds per primary over the processing section.
    redis_cpu: BTreeMap<u16, f64>,
    process_wall: f64,
    client_cpu: f64,
}

async fn run(
    cluster: &RedisCluster,
    conn: &Connection,
    primaries: &[u16],
    label: &str,
    queues: &[String],
    jobs: usize,
) -> Run {
    let mut qs = Vec::new();
    for name in queues {
        qs.push(Queue::new(conn, name).await.expect("queue"));
    }
    let started = Instant::now();
    let adds = qs.iter().map(|q| {
        let q = q.clone();
        async move {
            for chunk in (0..jobs).collect::<Vec<_>>().chunks(500) {
                let batch = chunk
                    .iter()
                    .map(|i| NewJob {
                        name: "b".into(),
                        data: json!({ "i": i }),
                        options: JobOptions::new(),
                    })
                    .collect();
                q.add_bulk(batch).await.expect("add_bulk");
            }
        }
    });
    futures_join_all(adds).await;
    let adds_per_s = (jobs * queues.len()) as f64 / started.elapsed().as_secs_f64();

    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.expect("host");
    let cpu0 = primaries_cpu(cluster, primaries);
    let own0 = own_cpu();
    let started = Instant::now();
    for q in &qs {
        let mut args = WorkerArgs::new(
            q.clone(),
            processor_fn(|_ctx: echomq::JobContext| async move { Ok(json!(null)) }),
        );
        args.options = WorkerOptions::default().concurrency(8);
        WorkerSetSpec::new(args)
            .spawn_linked(host.get_cell())
            .await
            .expect("worker set");
    }
    let total = (jobs * queues.len()) as u64;
    loop {
        let mut done = 0;
        for q in &qs {
            done += q.counts().await.expect("counts").completed;
        }
        if done >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let process_wall = started.elapsed().as_secs_f64();
    let client_cpu = own_cpu() - own0;
    let cpu1 = primaries_cpu(cluster, primaries);
    host.stop(None);
    tokio::time::sleep(Duration::from_millis(500)).await;
    Run {
        label: label.to_owned(),
        adds_per_s,
        jobs_per_s: total as f64 / process_wall,
        redis_cpu: cpu1.iter().map(|(p, c)| (*p, c - cpu0[p])).collect(),
        process_wall,
        client_cpu,
    }
}

/// Runs the futures concurrently on this task (no extra dependency).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    fs: impl IntoIterator<Item = F>,
) {
    let handles: Vec<_> = fs.into_iter().map(tokio::spawn).collect();
    for h in handles {
        h.await.expect("task");
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let scale = env_f64("BENCH_SCALE", 1.0);
    let jobs = (env_f64("BENCH_JOBS", 3000.0) * scale).max(100.0) as usize;
    let n = env_f64("BENCH_QUEUES", 6.0).max(3.0) as usize;
    eprintln!("starting a 6-node cluster…");
    let cluster = RedisCluster::start();
    let primaries = cluster.primaries();
    let conn = Connection::connect(ConnectionConfig::with_url(cluster.url()))
        .await
        .expect("connect to the cluster");

    let one = names(&cluster, "one", n, |_| primaries[0]);
    let spread = names(&cluster, "spread", n, |i| primaries[i % primaries.len()]);
    let mut runs = Vec::new();
    for (label, queues) in [
        ("1 primary".to_owned(), &one),
        (format!("{} primaries", primaries.len()), &spread),
    ] {
        eprintln!("{label}: {n} queues × {jobs} jobs…");
        runs.push(run(&cluster, &conn, &primaries, &label, queues, jobs).await);
    }

    println!(
        "{n} queues × {jobs} jobs, one worker tree per queue (concurrency 8, a processor that \
         returns at once), all in one process; Redis CPU per primary over the processing section.\n"
    );
    let heads: Vec<String> = primaries
        .iter()
        .map(|p| format!("primary :{p} CPU s"))
        .collect();
    println!(
        "| queues on | adds/s | jobs/s processed | {} | Redis CPU s / 1000 jobs (sum) | busiest primary % of one core | client CPU s |",
        heads.join(" | ")
    );
    println!("|{}", " --- |".repeat(6 + primaries.len()));
    for r in &runs {
        let total: f64 = r.redis_cpu.values().sum();
        let busiest = r.redis_cpu.values().cloned().fold(0.0, f64::max);
        let per: Vec<String> = primaries
            .iter()
            .map(|p| format!("{:.2}", r.redis_cpu[p]))
            .collect();
        println!(
            "| {} | {:.0} | {:.0} | {} | {:.3} | {:.0} % | {:.2} |",
            r.label,
            r.adds_per_s,
            r.jobs_per_s,
            per.join(" | "),
            total / (r.jobs_per_s * r.process_wall / 1000.0),
            100.0 * busiest / r.process_wall,
            r.client_cpu
        );
    }
    conn.close().await;
}
