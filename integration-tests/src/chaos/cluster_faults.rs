//! F38–F39 on a real Redis Cluster (3 primaries + 3 replicas, the harness
//! of `tests/suite/cluster.rs`): the queue's slot migrated under load, and its
//! primary SIGKILLed (failover).

use std::time::{Duration, Instant};

use echomq::{JobOptions, Queue, QueueOptions};
use fred::prelude::{Builder, Client, ClientLike, Config};

use super::accounting::{account, Ledger};
use super::fleet::{InProc, SetOptions};
use super::{expect, poll, row_of, sleep_job, Ctx, Row};
use crate::cluster::RedisCluster;

struct ClusterBed {
    cluster: Option<RedisCluster>,
    conn: echomq::Connection,
    client: Client,
    queue: Queue,
    ledger: Ledger,
    /// `counts()` calls that did not answer within 15 s.
    hung: std::sync::atomic::AtomicU64,
}

impl ClusterBed {
    async fn new(name: &str) -> ClusterBed {
        let cluster = tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("cluster starts");
        let conn = super::connect(&cluster.url()).await;
        let client = Builder::from_config(Config::from_url(&cluster.url()).expect("url"))
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
            .with_connection_config(|c| c.connection_timeout = Duration::from_secs(2))
            .set_policy(fred::types::config::ReconnectPolicy::new_constant(0, 100))
            .build()
            .expect("client");
        client.init().await.expect("cluster client");
        let queue = Queue::with_options(
            &conn,
            name,
            QueueOptions::default().max_len_events(1_000_000),
        )
        .await
        .expect("queue");
        ClusterBed {
            cluster: Some(cluster),
            conn,
            client,
            queue,
            ledger: Ledger::default(),
            hung: Default::default(),
        }
    }

    async fn add_n(&self, n: usize) {
        for i in 0..n {
            let id = format!("j-{i:06}");
            match self
                .queue
                .add("chaos", &sleep_job(30), JobOptions::new().job_id(&id))
                .await
            {
                Ok(got) => self.ledger.acked(got),
                Err(e) if e.is_connection() => self.ledger.ambiguous(id),
                Err(_) => self.ledger.refused(),
            }
        }
    }

    async fn drained(&self, limit: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        let n = self.ledger.acked_count() as u64;
        poll(limit, || async {
            // A bounded wait: a call on a client of the dead primary may
            // never answer (reported by F39).
            let counts = tokio::time::timeout(Duration::from_secs(15), self.queue.counts()).await;
            if std::env::var_os("CHAOS_VERBOSE").is_some() {
                eprintln!("chaos cluster counts: {counts:?}");
            }
            if counts.is_err() {
                self.hung.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            matches!(counts, Ok(Ok(c)) if c.pending() == 0 && c.completed + c.failed >= n)
        })
        .await
        .then(|| t0.elapsed())
    }

    fn key(&self) -> String {
        self.queue.keys().wait()
    }

    /// Runs `f` on the cluster off the async workers (it shells out to
    /// redis-cli and sleeps).
    async fn with_cluster<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut RedisCluster) -> T + Send + 'static,
    ) -> T {
        let mut c = self.cluster.take().expect("cluster");
        let (c, out) = tokio::task::spawn_blocking(move || {
            let out = f(&mut c);
            (c, out)
        })
        .await
        .expect("cluster task");
        self.cluster = Some(c);
        out
    }
}

fn set_opts() -> SetOptions {
    SetOptions {
        concurrency: 4,
        lock: Duration::from_secs(2),
        stalled_interval: Duration::from_millis(500),
        ..Default::default()
    }
}

/// F38: the queue's slot migrated to another primary (MIGRATING/IMPORTING,
/// MIGRATE key by key, SETSLOT NODE) while two worker sets run.
pub async fn f38(_ctx: Ctx) -> Row {
    let mut bed = ClusterBed::new("{chaos-f38}").await;
    bed.add_n(300).await;
    let a = InProc::start(&bed.queue, set_opts()).await;
    let b = InProc::start(&bed.queue, set_opts()).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        poll(Duration::from_secs(20), || async {
            bed.queue.counts().await.is_ok_and(|c| c.completed >= 20)
        })
        .await,
        "no progress before the migration",
    );
    let key = bed.key();
    let moved = bed
        .with_cluster(move |c| {
            let from = c.primary_of(&key);
            let to = c
                .primaries()
                .into_iter()
                .find(|p| *p != from)
                .expect("another primary");
            // One MIGRATE for all the slot's keys: no script can meet a
            // half-moved queue (docs/deployment.md §Resharding).
            let m = c.move_slot_of(&key, to, 100_000);
            (from, to, m.keys)
        })
        .await;
    let drained = bed.drained(Duration::from_secs(90)).await;
    a.close().await;
    b.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "not drained within 90 s after the migration",
    );
    let acc = account(
        &bed.conn,
        &bed.client,
        &bed.queue,
        &bed.ledger,
        Duration::from_secs(2),
    )
    .await;
    f.extend(acc.broken());
    let row = row_of(
        "F38",
        "Cluster: the queue's slot migrated to another primary under load",
        &acc,
        drained,
        f,
        Some(format!(
            "slot moved {} → {} with {} keys",
            moved.0, moved.1, moved.2
        )),
    );
    bed.conn.close().await;
    row
}

/// F39: the primary serving the queue SIGKILLed under load; its replica is
/// promoted. Asynchronous replication may lose acknowledged writes: lost
/// adds are measured, not asserted (docs/deployment.md).
pub async fn f39(_ctx: Ctx) -> Row {
    let mut bed = ClusterBed::new("{chaos-f39}").await;
    bed.add_n(300).await;
    let a = InProc::start(&bed.queue, set_opts()).await;
    let b = InProc::start(&bed.queue, set_opts()).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        poll(Duration::from_secs(20), || async {
            bed.queue.counts().await.is_ok_and(|c| c.completed >= 20)
        })
        .await,
        "no progress before the kill",
    );
    let key = bed.key();
    let victim = bed
        .with_cluster(move |c| {
            let victim = c.primary_of(&key);
            c.kill(victim);
            c.wait_healthy(Duration::from_secs(30));
            victim
        })
        .await;
    let drained = bed.drained(Duration::from_secs(90)).await;
    a.close().await;
    b.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "workers did not follow the new primary within 90 s",
    );
    let acc = account(
        &bed.conn,
        &bed.client,
        &bed.queue,
        &bed.ledger,
        Duration::from_secs(2),
    )
    .await;
    f.extend(acc.broken().into_iter().filter(|r| !r.starts_with("lost")));
    let lost = acc.lost.len();
    let row = row_of(
        "F39",
        "Cluster failover: SIGKILL of the queue's primary under load",
        &acc,
        drained,
        f,
        Some(format!(
            "primary {victim} killed, replica promoted; {lost} acked adds lost to asynchronous replication"
        )),
    );
    bed.conn.close().await;
    row
}
