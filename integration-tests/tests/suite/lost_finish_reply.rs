//! A finish whose reply is lost, on a job that retention removes at once
//! (`removeOnComplete: true`). The first send completes the job and deletes
//! its hash; the worker resends with its first `finishedOn`, and the resend
//! is refused ("job missing": the hash is gone). The worker must still
//! report the job completed — it was, once — and not a lost lock. The job
//! hash can no longer answer that; the events stream does.
//!
//! The fault: a proxy that forwards the finishing `EVALSHA` of one connection
//! to Redis, drops every reply on that connection from then on, and closes
//! it, so the client sees the connection fail after the write was applied.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use echomq::worker::processor_fn;
use echomq::{
    Host, JobOptions, KeepJobs, ProcessError, Queue, WorkerArgs, WorkerEvent, WorkerOptions,
};
use echomq_integration_tests::{timeline, wait_until, RedisServer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(30);

/// The SHA1s of the two finishing scripts.
fn finishing_shas() -> Vec<&'static str> {
    echomq::protocol::scripts::compiled()
        .filter(|(stem, _, _)| *stem == "moveToFinished-14" || *stem == "moveJobsToFinished-15")
        .map(|(_, _, sha)| sha)
        .collect()
}

/// Forwards to `upstream`; while `armed`, the first connection that sends a
/// finishing script gets it delivered, then hears nothing more and is closed.
struct FinishEater {
    port: u16,
    armed: Arc<AtomicBool>,
    eaten: Arc<AtomicU64>,
    finishes: Arc<AtomicU64>,
}

impl FinishEater {
    async fn start(upstream: u16) -> FinishEater {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let eaten = Arc::new(AtomicU64::new(0));
        let finishes = Arc::new(AtomicU64::new(0));
        let shas: Vec<Vec<u8>> = finishing_shas()
            .into_iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(shas.len(), 2);
        let (a, e, f) = (armed.clone(), eaten.clone(), finishes.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let muted = Arc::new(AtomicBool::new(false));
                let closed = Arc::new(tokio::sync::Notify::new());
                let (a, e, f, shas) = (a.clone(), e.clone(), f.clone(), shas.clone());
                let (m1, c1) = (muted.clone(), closed.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    // The tail of the previous read: a SHA split across two
                    // reads is still seen.
                    let mut tail: Vec<u8> = Vec::new();
                    loop {
                        let n = tokio::select! {
                            r = cr.read(&mut buf) => match r { Ok(n) if n > 0 => n, _ => break },
                            _ = c1.notified() => break,
                        };
                        let mut seen = std::mem::take(&mut tail);
                        seen.extend_from_slice(&buf[..n]);
                        let finishing = shas
                            .iter()
                            .any(|sha| seen.windows(sha.len()).any(|w| w == sha.as_slice()));
                        tail = seen[seen.len().saturating_sub(40)..].to_vec();
                        if finishing {
                            f.fetch_add(1, Ordering::SeqCst);
                        }
                        // Muted before the bytes go on, so no reply slips back.
                        let eat = finishing && a.swap(false, Ordering::SeqCst);
                        if eat {
                            m1.store(true, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        if eat {
                            e.fetch_add(1, Ordering::SeqCst);
                            // Redis applies the call; its reply is dropped; then
                            // the connection goes away under the client.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            c1.notify_waiters();
                            break;
                        }
                    }
                });
                let (m2, c2) = (muted, closed);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = tokio::select! {
                            r = sr.read(&mut buf) => match r { Ok(n) if n > 0 => n, _ => break },
                            _ = c2.notified() => break,
                        };
                        if !m2.load(Ordering::SeqCst) && cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = cw.shutdown().await;
                });
            }
        });
        FinishEater {
            port,
            armed,
            eaten,
            finishes,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

async fn lost_reply_of_a_removed_job(group_commit: usize) {
    let redis = RedisServer::start();
    let proxy = FinishEater::start(redis.port()).await;
    let conn = echomq::Connection::connect_url(&proxy.url()).await.unwrap();
    let queue = Queue::new(&conn, "lost").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let mut args = WorkerArgs::new(
        queue.clone(),
        processor_fn(|_| async { Ok::<_, ProcessError>(json!("done")) }),
    );
    args.options.group_commit = group_commit;
    args.events = Some(tx);
    let host = Host::start().await.unwrap();
    host.add_worker(args).await.unwrap();

    proxy.armed.store(true, Ordering::SeqCst);
    let id = queue
        .add(
            "once",
            &json!({}),
            JobOptions::new().remove_on_complete(KeepJobs::Count(0)),
        )
        .await
        .unwrap();
    let event = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("the worker reports the job")
        .unwrap();
    // The fault happened: the first finish was applied with its reply lost,
    // and the worker sent it again.
    assert_eq!(proxy.eaten.load(Ordering::SeqCst), 1, "no reply was lost");
    assert!(proxy.finishes.load(Ordering::SeqCst) >= 2, "no resend");
    assert_eq!(
        event,
        WorkerEvent::Completed { job_id: id.clone() },
        "a job completed once must be reported completed"
    );
    // Exactly one completion in Redis, and the hash gone as asked.
    let check = redis.client().await;
    let completions = timeline::stamps(&check, "emq:lost:events")
        .await
        .into_iter()
        .filter(|s| s.name == "completed" && s.job_id == id)
        .count();
    assert_eq!(completions, 1);
    wait_until("the queue is empty", LIMIT, async || {
        let c = queue.counts().await.unwrap();
        c.active + c.waiting + c.completed == 0
    })
    .await;
    host.close(Duration::from_secs(5)).await.unwrap();
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_finish_reply_on_a_removed_job_is_still_a_completion() {
    lost_reply_of_a_removed_job(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_grouped_finish_reply_on_a_removed_job_is_still_a_completion() {
    lost_reply_of_a_removed_job(WorkerOptions::default().group_commit).await;
}
