//! `--processor http:URL` when the endpoint misbehaves, each fault as
//! docs/processors.md §`http:` promises: a 5xx is retried per the job's
//! attempts, a body that is not the protocol fails the attempt, a request
//! hanging past `--http-timeout` is aborted and frees its slot, an
//! `https://` endpoint whose certificate is not trusted is refused, and a
//! cancelled job aborts its request. The endpoint is a real HTTP/1.1 server
//! in the test (a tokio listener that answers as each job's data says and
//! records, on Redis's clock, every request and every connection closed
//! under a hanging answer); the queue is a real `redis-server`. Every test
//! ends with every job accounted for: added = completed + failed + pending,
//! and one `completed` or `failed` event at most per job in the events stream.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::external::{HttpOptions, HttpProcessor};
use echomq::{JobCounts, JobOptions, Queue, WorkerArgs, WorkerSetSpec};
use echomq_integration_tests::timeline::now_ms;
use echomq_integration_tests::{events, wait_until, NullSupervisor, RedisServer};
use fred::prelude::Client;
use ractor::Actor;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::work_exec::{left, Endpoint, Work};

/// One deadline for every wait of a test.
const LIMIT: Duration = Duration::from_secs(120);

/// What the test endpoint does with one request.
enum Reply {
    /// Answers, then closes the connection.
    Answer {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// Answers nothing and holds the connection until the client closes it.
    Hang,
    /// Sends a 200's head and one protocol line (a log), then holds the
    /// connection as `Hang` does: the answer never ends.
    HangInBody,
    /// Closes the connection without a word.
    Drop,
}

fn json_reply(status: u16, body: Value) -> Reply {
    Reply::Answer {
        status,
        content_type: "application/json",
        body: body.to_string(),
    }
}

/// One request the endpoint received; times in ms on Redis's clock.
#[derive(Clone, Debug)]
struct Seen {
    id: String,
    attempt: u64,
    at_ms: u64,
    /// When the client closed a connection the endpoint held (`Reply::Hang`).
    closed_ms: Option<u64>,
}

/// An HTTP/1.1 endpoint on 127.0.0.1 that answers each job as `reply` says.
struct TestEndpoint {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type ReplyFn = dyn Fn(&Value) -> Reply + Send + Sync;

impl TestEndpoint {
    async fn start(clock: Client, reply: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jobs", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reply: Arc<ReplyFn> = Arc::new(reply);
        let log = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (clock, reply, log) = (clock.clone(), reply.clone(), log.clone());
                tokio::spawn(serve(stream, clock, reply, log));
            }
        });
        TestEndpoint { url, seen, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests for job `id`, in their order.
    fn of(&self, id: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.id == id).collect()
    }

    /// The URL as failure reasons show it.
    fn shown(&self) -> &str {
        &self.url
    }
}

/// One connection: one request (the client is told `Connection: close`).
async fn serve(
    mut stream: TcpStream,
    clock: Client,
    reply: Arc<ReplyFn>,
    log: Arc<Mutex<Vec<Seen>>>,
) {
    let Some(job) = read_request(&mut stream).await else {
        return;
    };
    let at_ms = now_ms(&clock).await;
    let index = {
        let mut log = log.lock().unwrap();
        log.push(Seen {
            id: job["id"].as_str().unwrap_or_default().to_owned(),
            attempt: job["attempt"].as_u64().unwrap_or_default(),
            at_ms,
            closed_ms: None,
        });
        log.len() - 1
    };
    match reply(&job) {
        Reply::Answer {
            status,
            content_type,
            body,
        } => {
            let head = format!(
                "HTTP/1.1 {status} Test\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Reply::Drop => {}
        hang @ (Reply::Hang | Reply::HangInBody) => {
            if let Reply::HangInBody = hang {
                let line = "{\"type\":\"log\",\"line\":\"started\"}\n";
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{line}\r\n",
                    line.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
            }
            // Nothing more comes from the client: the read ends only when it
            // closes the connection (or resets it).
            let mut buf = [0u8; 1024];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            let closed = now_ms(&clock).await;
            log.lock().unwrap()[index].closed_ms = Some(closed);
        }
    }
}

/// The JSON body of one POST; `None` if the connection ended before it.
async fn read_request(stream: &mut TcpStream) -> Option<Value> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("the worker sends a Content-Length");
    while data.len() < head_end + length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    Some(serde_json::from_slice(&data[head_end..head_end + length]).unwrap())
}

/// Every job is completed, failed or pending, and none finished twice: one
/// `completed` or `failed` event at most per job in the events stream (a
/// `failed` event is a final failure; a retried attempt emits none), as many
/// of each as the counts say.
async fn accounted(redis: &RedisServer, q: &Queue, added: u64) -> JobCounts {
    let counts = q.counts().await.unwrap();
    assert_eq!(
        counts.completed + counts.failed + counts.pending(),
        added,
        "every job accounted for: {counts:?}"
    );
    let c = redis.client().await;
    let mut finished: HashMap<String, Vec<String>> = HashMap::new();
    let (mut completed, mut failed) = (0, 0);
    for (name, fields) in events(&c, &format!("emq:{}:events", q.name())).await {
        if name == "completed" || name == "failed" {
            let id = fields.iter().find(|(k, _)| k == "jobId").unwrap().1.clone();
            finished.entry(id).or_default().push(name.clone());
            if name == "completed" {
                completed += 1;
            } else {
                failed += 1;
            }
        }
    }
    let twice: Vec<_> = finished.iter().filter(|(_, n)| n.len() > 1).collect();
    assert!(twice.is_empty(), "finished twice: {twice:?}");
    assert_eq!((completed, failed), (counts.completed, counts.failed));
    counts
}

async fn add(q: &Queue, mode: &str, attempts: i64) -> String {
    q.add(
        "h",
        &json!({ "mode": mode }),
        JobOptions::new().attempts(attempts),
    )
    .await
    .unwrap()
}

fn mode(job: &Value) -> &str {
    job["data"]["mode"].as_str().unwrap_or_default()
}

fn ok(job: &Value) -> Reply {
    json_reply(200, json!({ "done": job["id"] }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_answering_5xx_is_retried_per_attempts_then_fails_and_a_later_200_completes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "five").await.unwrap();
    let endpoint = TestEndpoint::start(redis.client().await, |job| match mode(job) {
        "always-503" => json_reply(503, json!({ "error": "overloaded" })),
        // The first two attempts meet a 500 (a plain text reason), the third a 200.
        "500-twice" if job["attempt"].as_u64() < Some(3) => Reply::Answer {
            status: 500,
            content_type: "text/plain",
            body: "boom".into(),
        },
        "drop" => Reply::Drop,
        _ => ok(job),
    })
    .await;
    let always = add(&q, "always-503", 3).await;
    let twice = add(&q, "500-twice", 3).await;
    // The connection closed with no answer at all: retried as a 5xx is.
    let dropped = add(&q, "drop", 2).await;
    let fine = add(&q, "ok", 1).await;
    let deadline = Instant::now() + LIMIT;
    let processor = format!("http:{}", endpoint.url);
    let mut work = Work::start(&url, "five", &processor, &["--concurrency", "1"]);
    wait_until("every job finished", left(deadline), async || {
        let c = q.counts().await.unwrap();
        c.completed + c.failed == 4
    })
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
    let counts = accounted(&redis, &q, 4).await;
    assert_eq!((counts.completed, counts.failed), (2, 2), "{counts:?}");

    let job = q.get_job(&always).await.unwrap().unwrap();
    assert_eq!(
        job.failed_reason.as_deref(),
        Some(format!("HTTP 503 from {}: overloaded", endpoint.shown()).as_str())
    );
    assert_eq!(job.attempts_made, 3, "every attempt used: {job:?}");
    let attempts: Vec<u64> = endpoint.of(&always).iter().map(|s| s.attempt).collect();
    assert_eq!(attempts, [1, 2, 3], "one request per attempt");

    let job = q.get_job(&twice).await.unwrap().unwrap();
    assert_eq!(job.return_value, Some(json!({ "done": twice })), "{job:?}");
    assert_eq!(job.attempts_made, 3, "{job:?}");
    let attempts: Vec<u64> = endpoint.of(&twice).iter().map(|s| s.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);

    let job = q.get_job(&dropped).await.unwrap().unwrap();
    let reason = job.failed_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(&format!("HTTP request to {} failed: ", endpoint.shown())),
        "{job:?}"
    );
    assert_eq!(job.attempts_made, 2, "{job:?}");
    assert_eq!(endpoint.of(&dropped).len(), 2);

    let job = q.get_job(&fine).await.unwrap().unwrap();
    assert_eq!(job.return_value, Some(json!({ "done": fine })));
    assert_eq!(endpoint.of(&fine).len(), 1);
    assert_eq!(endpoint.seen().len(), 9, "no request beyond the attempts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_the_protocol_fails_the_attempt_and_the_worker_goes_on() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "garbage").await.unwrap();
    let lines = |body: &str| Reply::Answer {
        status: 200,
        content_type: "application/x-ndjson",
        body: body.to_owned(),
    };
    let endpoint = TestEndpoint::start(redis.client().await, move |job| match mode(job) {
        "not-json" => Reply::Answer {
            status: 200,
            content_type: "application/json",
            body: "hello, not JSON".into(),
        },
        "garbage-line" => lines("hello\n"),
        "not-a-message" => lines("[1,2]\n"),
        "wrong-field" => lines("{\"type\":\"progress\"}\n"),
        "no-answer" => lines("{\"type\":\"log\",\"line\":\"working\"}\n"),
        _ => ok(job),
    })
    .await;
    let mut ok_ids = Vec::new();
    for _ in 0..3 {
        ok_ids.push(add(&q, "ok", 1).await);
    }
    // Two attempts each: the attempt fails and is retried, then fails for good.
    let mut bad = Vec::new();
    for m in [
        "not-json",
        "garbage-line",
        "not-a-message",
        "wrong-field",
        "no-answer",
    ] {
        bad.push((m, add(&q, m, 2).await));
    }
    for _ in 0..3 {
        ok_ids.push(add(&q, "ok", 1).await);
    }
    let deadline = Instant::now() + LIMIT;
    let processor = format!("http:{}", endpoint.url);
    let mut work = Work::start(&url, "garbage", &processor, &["--concurrency", "1"]);
    wait_until("every job finished", left(deadline), async || {
        let c = q.counts().await.unwrap();
        c.completed + c.failed == 11
    })
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
    let counts = accounted(&redis, &q, 11).await;
    assert_eq!((counts.completed, counts.failed), (6, 5), "{counts:?}");
    for id in &ok_ids {
        let job = q.get_job(id).await.unwrap().unwrap();
        assert_eq!(job.return_value, Some(json!({ "done": id })), "{job:?}");
    }
    let from = endpoint.shown();
    let bad_ids = bad.clone();
    for (m, id) in bad {
        let want = match m {
            "not-json" => format!("HTTP 200 from {from}: the body is not JSON: \"hello, not JSON\""),
            "garbage-line" => {
                format!("HTTP answer from {from}: protocol error: the line \"hello\" is not JSON")
            }
            "not-a-message" => format!(
                "HTTP answer from {from}: protocol error: the line \"[1,2]\" is not a message (a JSON object with a string \"type\")"
            ),
            "wrong-field" => format!(
                "HTTP answer from {from}: protocol error: a \"progress\" message has no \"value\""
            ),
            _ => format!("HTTP answer from {from} ended before a completed or failed message"),
        };
        let job = q.get_job(&id).await.unwrap().unwrap();
        assert_eq!(job.failed_reason.as_deref(), Some(want.as_str()), "{m}");
        assert_eq!(job.attempts_made, 2, "{m}: retried, then failed: {job:?}");
        assert_eq!(endpoint.of(&id).len(), 2, "{m}: one request per attempt");
    }
    assert_eq!(endpoint.seen().len(), 6 + 10);
    // What a body streamed before it went wrong was applied all the same:
    // the log line of each of the two attempts that ended without an answer.
    let (_, no_answer) = bad_ids.last().unwrap();
    let logs = q
        .get_job_logs(no_answer, 0, -1, echomq::RangeOrder::Ascending)
        .await
        .unwrap()
        .logs;
    assert_eq!(logs, ["working", "working"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_hanging_past_the_http_timeout_is_aborted_and_its_slot_freed() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "hang").await.unwrap();
    let timeout_ms = 2000;
    let endpoint = TestEndpoint::start(redis.client().await, |job| match mode(job) {
        "hang" => Reply::Hang,
        "hang-once" if job["attempt"] == 1 => Reply::Hang,
        "hang-in-body" => Reply::HangInBody,
        _ => ok(job),
    })
    .await;
    // Hangs on every attempt: fails for good once its one attempt timed out.
    let stuck = add(&q, "hang", 1).await;
    // Hangs on its first attempt only: the retry completes.
    let once = add(&q, "hang-once", 2).await;
    // Its answer starts (a 200, a log line) and never ends: the timeout
    // bounds the body as well.
    let streaming = add(&q, "hang-in-body", 1).await;
    let mut ok_ids = Vec::new();
    for _ in 0..3 {
        ok_ids.push(add(&q, "ok", 1).await);
    }
    let deadline = Instant::now() + LIMIT;
    let processor = format!("http:{}", endpoint.url);
    // One slot: the jobs after a hang complete only if its slot came back.
    let mut work = Work::start(
        &url,
        "hang",
        &processor,
        &[
            "--concurrency",
            "1",
            "--http-timeout",
            &timeout_ms.to_string(),
        ],
    );
    wait_until("4 completed and 2 failed", left(deadline), async || {
        let c = q.counts().await.unwrap();
        (c.completed, c.failed) == (4, 2)
    })
    .await;
    // The endpoint saw each hanging request's connection closed by the
    // worker (the close is recorded just after the job's end is written).
    wait_until(
        "the 3 hanging connections closed",
        left(deadline),
        async || {
            endpoint
                .seen()
                .iter()
                .filter(|s| s.closed_ms.is_some())
                .count()
                == 3
        },
    )
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
    let counts = accounted(&redis, &q, 6).await;
    assert_eq!((counts.completed, counts.failed), (4, 2), "{counts:?}");
    let reason = format!(
        "HTTP request to {} timed out after {timeout_ms} ms",
        endpoint.shown()
    );
    let job = q.get_job(&stuck).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some(reason.as_str()));
    assert_eq!(job.attempts_made, 1);
    let job = q.get_job(&streaming).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some(reason.as_str()));
    let logs = q
        .get_job_logs(&streaming, 0, -1, echomq::RangeOrder::Ascending)
        .await
        .unwrap()
        .logs;
    assert_eq!(logs, ["started"], "the line before the hang was applied");
    let job = q.get_job(&once).await.unwrap().unwrap();
    assert_eq!(job.return_value, Some(json!({ "done": once })), "{job:?}");
    assert_eq!(job.attempts_made, 2, "{job:?}");
    for id in &ok_ids {
        let job = q.get_job(id).await.unwrap().unwrap();
        assert_eq!(job.return_value, Some(json!({ "done": id })), "{job:?}");
    }
    // Aborted at the timeout, not before it: each hanging request was held
    // about `--http-timeout` on Redis's clock. The margin covers what the
    // clock of the timeout ran before the request arrived (connecting) and
    // the endpoint's TIME calls, slow on a loaded machine.
    for id in [&stuck, &once, &streaming] {
        let first = &endpoint.of(id)[0];
        let held = first.closed_ms.expect("the connection was closed") - first.at_ms;
        assert!(
            held + 500 >= timeout_ms,
            "job {id}: aborted after {held} ms, before the {timeout_ms} ms timeout"
        );
    }
    assert_eq!(endpoint.seen().len(), 7, "{:?}", endpoint.seen());
}

/// A self-signed certificate named `name` (no CA: it signs itself; the name
/// tells it apart from another as an issuer) for the address `ip`, made by
/// the `openssl` command as the harness's TLS certificates are.
fn self_signed(dir: &std::path::Path, name: &str, ip: &str) -> (String, String) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("the openssl command (install openssl)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    std::fs::write(
        dir.join("ext"),
        format!("subjectAltName=IP:{ip}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"),
    )
    .unwrap();
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        &format!("/CN={name}"),
        "-keyout",
        "self.key",
        "-out",
        "self.csr",
    ]);
    run(&[
        "x509", "-req", "-in", "self.csr", "-signkey", "self.key", "-days", "2", "-extfile", "ext",
        "-out", "self.pem",
    ]);
    let path = |f: &str| dir.join(f).display().to_string();
    (path("self.pem"), path("self.key"))
}

/// `https://` endpoints with a certificate the worker must not accept: a
/// self-signed one it was not given, and one it was given (as its CA file)
/// that names another address. Both are refused on every attempt; the
/// self-signed one given as the CA file completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_https_endpoint_is_refused_unless_its_certificate_is_given() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (cert, key) = self_signed(dirs[0].path(), "echomq test endpoint", "127.0.0.1");
    // The worker's "system roots", the same on every machine: another
    // self-signed certificate (`SSL_CERT_FILE`), which signed nothing here.
    let (system_roots, _) = self_signed(dirs[1].path(), "echomq test unrelated", "127.0.0.1");
    let (misnamed, misnamed_key) = self_signed(dirs[2].path(), "echomq test other", "127.0.0.2");
    let endpoint = Endpoint::start(&["--tls", &cert, &key]);
    let elsewhere = Endpoint::start(&["--tls", &misnamed, &misnamed_key]);
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let deadline = Instant::now() + LIMIT;
    // No way to turn verification off exists; without a CA file the system's
    // roots are the only trust, and they do not know this certificate.
    for (queue, at, ca, refusal) in [
        (
            "untrusted",
            &endpoint,
            None,
            Some("invalid peer certificate: UnknownIssuer"),
        ),
        (
            "misnamed",
            &elsewhere,
            Some(&misnamed),
            Some("invalid peer certificate: "),
        ),
        ("trusted", &endpoint, Some(&cert), None),
    ] {
        let q = Queue::new(&conn, queue).await.unwrap();
        let id = q
            .add("j", &json!({ "i": 7 }), JobOptions::new().attempts(2))
            .await
            .unwrap();
        let processor = format!("http:https://{}/jobs", at.addr);
        let mut extra = Vec::new();
        if let Some(ca) = ca {
            extra = vec!["--http-ca-file", ca.as_str()];
        }
        let env = [("SSL_CERT_FILE", system_roots.as_str())];
        let mut work = Work::start_with_env(&url, queue, &processor, &extra, &env);
        wait_until("the job finished", left(deadline), async || {
            let c = q.counts().await.unwrap();
            c.completed + c.failed == 1
        })
        .await;
        work.sigterm();
        assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
        accounted(&redis, &q, 1).await;
        let job = q.get_job(&id).await.unwrap().unwrap();
        let Some(refusal) = refusal else {
            assert_eq!(
                job.return_value,
                Some(json!({ "handled": "j", "echo": { "i": 7 } })),
                "{}",
                work.log()
            );
            continue;
        };
        let reason = job.failed_reason.clone().unwrap_or_default();
        assert!(
            reason.starts_with(&format!(
                "HTTP request to https://{}/jobs failed: ",
                at.addr
            )) && reason.contains(refusal),
            "{queue}: {job:?}"
        );
        assert!(
            job.return_value.is_none(),
            "{queue}: never accepted: {job:?}"
        );
        assert_eq!(
            job.attempts_made, 2,
            "{queue}: retried, refused again: {job:?}"
        );
        if queue == "misnamed" {
            assert!(
                reason.contains("127.0.0.1") && reason.contains("127.0.0.2"),
                "{reason}"
            );
        }
    }
}

/// A job cancelled from another process (`echomq cancel`) while its request
/// is in flight: the request is aborted at once (the endpoint sees its
/// connection closed), the job is failed with the canceller's reason, and
/// the slot runs the next job. The worker is the library's, with a cancel
/// grace longer than the test's deadline: the CLI's 1 s grace would drop the
/// request anyway, so only a long one shows that the processor itself
/// aborts it when told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_process_aborts_the_request_in_flight() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "cancel").await.unwrap();
    let endpoint = TestEndpoint::start(redis.client().await, |job| match mode(job) {
        "hang" => Reply::Hang,
        _ => ok(job),
    })
    .await;
    let hung = add(&q, "hang", 3).await;
    let http = HttpProcessor::new(&endpoint.url, HttpOptions::default()).unwrap();
    let mut args = WorkerArgs::new(q.clone(), Arc::new(http));
    args.options.concurrency = 1;
    args.options.cancel_grace = LIMIT * 2;
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    wait_until("the request arrived", left(deadline), async || {
        !endpoint.of(&hung).is_empty()
    })
    .await;
    let out = crate::cli::run(
        &url,
        &["cancel", "cancel", &hung, "--reason", "no longer wanted"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("job {hung} stopped and failed: no longer wanted")
    );
    wait_until(
        "the request's connection closed",
        left(deadline),
        async || endpoint.of(&hung)[0].closed_ms.is_some(),
    )
    .await;
    let next = add(&q, "ok", 1).await;
    wait_until("the next job completed", left(deadline), async || {
        q.counts().await.unwrap().completed == 1
    })
    .await;
    set.close(Duration::from_secs(10)).await.unwrap();
    host.stop(None);
    let counts = accounted(&redis, &q, 2).await;
    assert_eq!((counts.completed, counts.failed), (1, 1), "{counts:?}");
    let job = q.get_job(&hung).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some("no longer wanted"));
    assert_eq!(
        job.attempts_made, 1,
        "failed for good, not retried: {job:?}"
    );
    assert_eq!(endpoint.of(&hung).len(), 1, "never sent again");
    let job = q.get_job(&next).await.unwrap().unwrap();
    assert_eq!(job.return_value, Some(json!({ "done": next })));
}
