//! Payload offload (issue 44, docs/operations.md §Memory): payloads over a
//! threshold go to a blob store — a directory, or a real S3-compatible server
//! (moto) — and the job keeps a reference envelope; EchoMQ and BullMQ Node
//! 6.7.6 (through `shims/node/emq-codec.js`) read each other's offloaded data
//! byte for byte; the sweep deletes exactly the blobs no job uses; a missing,
//! tampered or foreign reference fails its job for good.

use std::time::Duration;

use echomq::codec::{BlobStore, Codec, CodecOptions, DirStore, OffloadOptions, S3Config, S3Store};
use echomq::{JobOptions, JobState, Queue};
use echomq_integration_tests::s3::S3Server;
use echomq_integration_tests::{wait_until, NodeBullmq, RedisServer};
use fred::prelude::*;
use serde_json::{json, Value as Json};

use super::codecs::{
    finished, node_codec, open, order, python_codec, rust_work, rust_work_padded, stored,
};
use echomq_integration_tests::python_bullmq;

const THRESHOLD: usize = 4 * 1024;

fn dir_offload(dir: &std::path::Path) -> OffloadOptions {
    OffloadOptions::new(BlobStore::Dir(DirStore::new(dir).unwrap())).threshold(THRESHOLD)
}

/// Files the directory store holds (blobs, not temporaries).
fn blob_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .filter(|f| !f.file_name().to_string_lossy().starts_with('.'))
        .count()
}

async fn tracked(c: &Client, q: &str) -> (u64, u64) {
    let blobs: u64 = c.zcard(format!("emq:{q}:blobs")).await.unwrap();
    let owners: u64 = c.hlen(format!("emq:{q}:blobs:owner")).await.unwrap();
    (blobs, owners)
}

/// A server, its connections and an empty blob directory.
struct Bed {
    redis: RedisServer,
    conn: echomq::Connection,
    c: Client,
    dir: tempfile::TempDir,
}

async fn bed() -> Bed {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    Bed {
        redis,
        conn,
        c,
        dir: tempfile::tempdir().unwrap(),
    }
}

/// Queue `q` offloading to the bed's directory above [`THRESHOLD`], no codec.
async fn offloading(b: &Bed, q: &str) -> Queue {
    open(
        &b.conn,
        q,
        CodecOptions::default().offload(Some(dir_offload(b.dir.path()))),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_go_to_the_blob_store_and_come_back_byte_for_byte() {
    let b = bed().await;
    let (conn, c, dir) = (&b.conn, &b.c, &b.dir);
    let q = "off-dir";
    let codec = CodecOptions::default()
        .encode(Some(Codec::Gzip))
        .offload(Some(dir_offload(dir.path())));
    let queue = Queue::with_options(
        conn,
        q,
        echomq::QueueOptions::default()
            .codec(codec)
            // Offloaded, a payload is bounded by the blob store, not by this.
            .max_data_bytes(THRESHOLD),
    )
    .await
    .unwrap();
    // 15 KB orders gzip to ~3 KB (inline); a 200 KB random-ish one does not.
    let big = json!({"blob": (0..20_000).map(|i| format!("{:x}", i * 2654435761u64 % 99991)).collect::<Vec<_>>()});
    let small = order(1);
    let id_big = queue.add("big", &big, JobOptions::new()).await.unwrap();
    let id_small = queue.add("small", &small, JobOptions::new()).await.unwrap();
    let bulk: Vec<echomq::NewJob> = (0..3)
        .map(|_| echomq::NewJob {
            name: "big".into(),
            data: big.clone(),
            options: JobOptions::new(),
        })
        .collect();
    let bulk_ids = queue.add_bulk(bulk).await.unwrap();

    let env = stored(c, q, &id_big, "data").await;
    assert_eq!(env["emq:codec"], "blob", "{env}");
    assert_eq!(env["store"], "dir");
    let raw: String = c.hget(format!("emq:{q}:{id_big}"), "data").await.unwrap();
    assert!(raw.len() < 300, "Redis keeps only the reference: {raw}");
    assert_eq!(stored(c, q, &id_small, "data").await["emq:codec"], "gzip");
    assert_eq!(blob_files(dir.path()), 4);
    assert_eq!(tracked(c, q).await, (4, 4), "every blob tracked and owned");

    // The worker reads the blobs; its large return values are offloaded too.
    let seen = rust_work_padded(&queue, 2 * THRESHOLD, async || {
        finished(c, q).await == (5, 0)
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let text = serde_json::to_string(&big).unwrap();
    for id in bulk_ids.iter().chain([&id_big]) {
        assert_eq!(seen[id], text, "job {id}: byte-identical data");
    }
    assert_eq!(seen[&id_small], serde_json::to_string(&small).unwrap());
    let job = queue.get_job(&id_big).await.unwrap().unwrap();
    let rv = job.return_value.unwrap();
    assert_eq!(rv["emq:codec"], "blob", "{rv}");
    let rv = queue.codec().load(&rv).await.unwrap().unwrap();
    assert_eq!(rv["seenBy"], "rust");
    assert_eq!(rv["pad"].as_str().unwrap().len(), 2 * THRESHOLD);
    assert_eq!(blob_files(dir.path()), 9, "4 data + 5 return values");
    assert_eq!(tracked(c, q).await, (9, 9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_and_echomq_read_each_others_offloaded_payloads() {
    let b = bed().await;
    let (redis, conn, c, dir) = (&b.redis, &b.conn, &b.c, &b.dir);
    let d = dir.path().to_str().unwrap().to_owned();
    let data: Vec<Json> = (0..3).map(order).collect();
    let texts: Vec<String> = data.iter().map(|d| d.to_string()).collect();

    // EchoMQ offloads (plain JSON, no codec), a Node worker reads through the shim.
    let q = "off-to-node";
    let codec = CodecOptions::default().offload(Some(dir_offload(dir.path())));
    let queue = open(conn, q, codec.clone()).await;
    let mut ids = Vec::new();
    for d in &data {
        ids.push(queue.add("order", d, JobOptions::new()).await.unwrap());
    }
    assert_eq!(stored(c, q, &ids[0], "data").await["emq:codec"], "blob");
    // A plain BullMQ client (no shim) reads the job: valid JSON, the reference as data.
    let read = NodeBullmq::V6_7.bullmq("read-jobs", &redis.url(), q, json!({ "ids": ids }));
    assert_eq!(read[&ids[0]]["data"]["emq:codec"], "blob", "{read}");
    assert_eq!(read[&ids[0]]["state"], "waiting", "{read}");
    let ran = node_codec(
        "work",
        &redis.url(),
        q,
        "",
        json!({"count": 3, "offloadDir": d, "threshold": THRESHOLD, "returnPad": 2 * THRESHOLD}),
    );
    assert_eq!(ran["done"], true, "{ran}");
    assert_eq!(ran["failed"], json!({}), "{ran}");
    for (id, text) in ids.iter().zip(&texts) {
        assert_eq!(
            ran["seen"][id]["text"],
            text.as_str(),
            "job {id}: byte-identical"
        );
        // Node's large return value went to the store, owned by its job.
        let rv = stored(c, q, id, "returnvalue").await;
        assert_eq!(rv["emq:codec"], "blob", "{rv}");
        let rv = queue.codec().load(&rv).await.unwrap().unwrap();
        assert_eq!(rv["seenBy"], "node");
    }
    assert_eq!(tracked(c, q).await, (6, 6));

    // Node offloads through the shim, an EchoMQ worker reads.
    let q = "off-from-node";
    let jobs: Vec<Json> = data
        .iter()
        .map(|d| json!({"name": "order", "data": d}))
        .collect();
    let ids = node_codec(
        "add",
        &redis.url(),
        q,
        "",
        json!({"jobs": jobs, "offloadDir": d, "threshold": THRESHOLD}),
    );
    let ids: Vec<String> = serde_json::from_value(ids).unwrap();
    assert_eq!(stored(c, q, &ids[0], "data").await["emq:codec"], "blob");
    assert_eq!(
        tracked(c, q).await,
        (3, 3),
        "the shim tracks its blobs as EchoMQ does"
    );
    let queue = open(conn, q, codec).await;
    let seen = rust_work(&queue, async || finished(c, q).await == (3, 0)).await;
    let seen = seen.lock().unwrap().clone();
    for (id, text) in ids.iter().zip(&texts) {
        assert_eq!(&seen[id], text, "job {id}: byte-identical");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_reads_echomqs_offloaded_payloads_and_offloads_its_own() {
    let Some(python) = python_bullmq() else {
        return;
    };
    let b = bed().await;
    let (redis, conn, c, dir) = (&b.redis, &b.conn, &b.c, &b.dir);
    let d = dir.path().to_str().unwrap().to_owned();
    let data: Vec<Json> = (20..23).map(order).collect();
    let codec = CodecOptions::default()
        .encode(Some(Codec::Gzip))
        .offload(Some(
            OffloadOptions::new(BlobStore::Dir(DirStore::new(dir.path()).unwrap())).threshold(1024),
        ));

    let q = "off-to-python";
    let queue = open(conn, q, codec.clone()).await;
    let mut ids = Vec::new();
    for d in &data {
        ids.push(queue.add("order", d, JobOptions::new()).await.unwrap());
    }
    assert_eq!(stored(c, q, &ids[0], "data").await["emq:codec"], "blob");
    let ran = python_codec(
        &python,
        "work",
        &redis.url(),
        q,
        "",
        json!({"count": 3, "offloadDir": d}),
    );
    assert_eq!(ran["done"], true, "{ran}");
    for (id, data) in ids.iter().zip(&data) {
        let seen: Json = serde_json::from_str(ran["seen"][id]["text"].as_str().unwrap()).unwrap();
        assert_eq!(&seen, data, "job {id}");
    }

    let q = "off-from-python";
    let jobs: Vec<Json> = data
        .iter()
        .map(|d| json!({"name": "order", "data": d}))
        .collect();
    let ids = python_codec(
        &python,
        "add",
        &redis.url(),
        q,
        "",
        json!({"codec": "gzip", "jobs": jobs, "offloadDir": d, "threshold": 1024}),
    );
    let ids: Vec<String> = serde_json::from_value(ids).unwrap();
    assert_eq!(stored(c, q, &ids[0], "data").await["emq:codec"], "blob");
    assert_eq!(
        tracked(c, q).await,
        (3, 3),
        "the shim tracks its blobs as EchoMQ does"
    );
    let queue = open(conn, q, codec).await;
    let seen = rust_work(&queue, async || finished(c, q).await == (3, 0)).await;
    let seen = seen.lock().unwrap().clone();
    for (id, data) in ids.iter().zip(&data) {
        let got: Json = serde_json::from_str(&seen[id]).unwrap();
        assert_eq!(&got, data, "job {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_events_hand_over_decoded_return_values() {
    let b = bed().await;
    let (conn, c, dir) = (&b.conn, &b.c, &b.dir);
    let q = "off-events";
    let codec = CodecOptions::default()
        .encode(Some(Codec::Gzip))
        .offload(Some(dir_offload(dir.path())));
    let queue = open(conn, q, codec.clone()).await;
    let mut args = echomq::QueueEventsArgs::new(conn.clone(), q).codec(codec);
    args.block = Duration::from_millis(200);
    let (qe, _h) = ractor::Actor::spawn(None, echomq::QueueEvents, args)
        .await
        .unwrap();
    let mut sub = ractor::call_t!(qe, echomq::QueueEventsMsg::Subscribe, 2000, 100).unwrap();
    // One short return value (plain under gzip), one over the threshold (offloaded).
    let small = queue
        .add("s", &json!({"n": 1}), JobOptions::new())
        .await
        .unwrap();
    let _ = rust_work(&queue, async || finished(c, q).await == (1, 0)).await;
    let big = queue
        .add("b", &json!({"n": 2}), JobOptions::new())
        .await
        .unwrap();
    let _ = rust_work_padded(&queue, 2 * THRESHOLD, async || {
        finished(c, q).await == (2, 0)
    })
    .await;
    let short = stored(c, q, &small, "returnvalue").await;
    assert_eq!(short["seenBy"], "rust", "stored plain: {short}");
    assert_eq!(stored(c, q, &big, "returnvalue").await["emq:codec"], "blob");
    let mut completed = std::collections::BTreeMap::new();
    while completed.len() < 2 {
        let d = tokio::time::timeout(Duration::from_secs(10), sub.recv())
            .await
            .expect("a delivery within 10 s")
            .expect("actor alive");
        if let echomq::Delivery::Event(e) = d {
            if let echomq::protocol::EventKind::Completed {
                job_id,
                return_value,
                ..
            } = e.kind
            {
                completed.insert(job_id, return_value);
            }
        }
    }
    assert_eq!(completed[&small], json!({"seenBy": "rust", "len": 7}));
    assert_eq!(completed[&big]["seenBy"], "rust");
    assert_eq!(
        completed[&big]["pad"].as_str().unwrap().len(),
        2 * THRESHOLD
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_exactly_the_blobs_no_job_uses() {
    let b = bed().await;
    let (c, dir) = (&b.c, &b.dir);
    let q = "off-sweep";
    let queue = offloading(&b, q).await;
    let big = json!({"pad": "x".repeat(2 * THRESHOLD)});
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(queue.add("big", &big, JobOptions::new()).await.unwrap());
    }
    // Two removed (as retention or any client would), one given new inline
    // data, and a blob announced by a producer that died before adding.
    queue.remove(&ids[0], false).await.unwrap();
    queue.remove(&ids[1], false).await.unwrap();
    queue
        .update_data(&ids[2], &json!({"small": true}))
        .await
        .unwrap();
    let orphan = "0123456789abcdef0123456789abcdef";
    std::fs::create_dir_all(dir.path().join("01")).unwrap();
    std::fs::write(dir.path().join("01").join(orphan), b"{}").unwrap();
    let _: () = c
        .zadd(
            format!("emq:{q}:blobs"),
            None,
            None,
            false,
            false,
            (1.0, orphan),
        )
        .await
        .unwrap();
    assert_eq!(blob_files(dir.path()), 7);

    // Within the grace nothing is touched.
    let s = queue
        .collect_blobs(Duration::from_secs(3600), 100)
        .await
        .unwrap();
    assert_eq!(
        (s.examined, s.deleted),
        (1, 1),
        "only the old orphan is due: {s:?}"
    );
    assert_eq!(blob_files(dir.path()), 6);
    // Past it: the removed, replaced and orphaned blobs go, a page at a time.
    let mut deleted = 0;
    let mut calls = 0;
    loop {
        let s = queue.collect_blobs(Duration::ZERO, 2).await.unwrap();
        assert!(s.examined <= 2, "a page is bounded: {s:?}");
        deleted += s.deleted;
        calls += 1;
        if s.examined < 2 || calls > 10 {
            break;
        }
    }
    assert_eq!(
        deleted, 3,
        "the blobs of the two removed jobs and the updated one"
    );
    assert_eq!(blob_files(dir.path()), 3);
    assert_eq!(tracked(c, q).await, (3, 3));
    // What stays is what the remaining jobs read.
    let seen = rust_work(&queue, async || finished(c, q).await == (4, 0)).await;
    let seen = seen.lock().unwrap().clone();
    for id in &ids[3..] {
        assert_eq!(seen[id], big.to_string(), "job {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_references_fail_their_jobs_for_good() {
    let b = bed().await;
    let (c, dir) = (&b.c, &b.dir);
    let q = "off-bad";
    let queue = offloading(&b, q).await;
    let big = json!({"pad": "y".repeat(2 * THRESHOLD)});
    let missing = queue.add("missing", &big, JobOptions::new()).await.unwrap();
    let tampered = queue
        .add("tampered", &big, JobOptions::new())
        .await
        .unwrap();
    let key = |env: &Json| env["key"].as_str().unwrap().to_owned();
    let k = key(&stored(c, q, &missing, "data").await);
    std::fs::remove_file(dir.path().join(&k[..2]).join(&k)).unwrap();
    let k = key(&stored(c, q, &tampered, "data").await);
    let path = dir.path().join(&k[..2]).join(&k);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    // A foreign reference naming a path outside the store.
    let foreign = json!({"emq:codec": "blob", "v": 1, "store": "dir", "key": "../../etc/passwd", "len": 10, "sha256": "00"});
    let escape = queue
        .add("escape", &foreign, JobOptions::new().attempts(3))
        .await
        .unwrap();
    let _ = rust_work(&queue, async || finished(c, q).await == (0, 3)).await;
    for (id, why) in [
        (&missing, "missing from the blob store"),
        (&tampered, "does not match its reference"),
        (&escape, "not a blob key"),
    ] {
        let job = queue.get_job(id).await.unwrap().unwrap();
        let reason = job.failed_reason.clone().unwrap_or_default();
        assert!(reason.contains(why), "job {id}: {reason}");
        assert_eq!(job.attempts_made, 1, "job {id} not retried: {reason}");
        assert_eq!(queue.get_job_state(id).await.unwrap(), JobState::Failed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_compatible_store_holds_and_frees_the_blobs() {
    let Some(s3) = S3Server::start() else {
        return;
    };
    s3.create_bucket("emq-blobs");
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let config = S3Config::new(
        s3.endpoint().parse().unwrap(),
        "emq-blobs",
        "test-key",
        "test-secret",
    )
    .prefix("payloads");
    assert!(!format!("{config:?}").contains("test-secret"), "{config:?}");
    let store = BlobStore::S3(Box::new(S3Store::new(config).unwrap()));
    let q = "off-s3";
    let codec = CodecOptions::default()
        .encode(Some(Codec::Gzip))
        .offload(Some(OffloadOptions::new(store).threshold(1024)));
    let queue = open(&conn, q, codec).await;
    let big = json!({"blob": (0..5_000).map(|i| format!("{:x}", i * 2654435761u64 % 99991)).collect::<Vec<_>>()});
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(queue.add("big", &big, JobOptions::new()).await.unwrap());
        }
        ids
    };
    let env = stored(&c, q, &ids[0], "data").await;
    assert_eq!(
        (env["emq:codec"].as_str(), env["store"].as_str()),
        (Some("blob"), Some("s3"))
    );
    let object = format!(
        "{}/emq-blobs/payloads/{}",
        s3.endpoint(),
        env["key"].as_str().unwrap()
    );
    let seen = rust_work(&queue, async || finished(&c, q).await == (3, 0)).await;
    for id in &ids {
        assert_eq!(seen.lock().unwrap()[id], big.to_string(), "job {id}");
    }
    // Removed, the job's object is deleted by the sweep.
    queue.remove(&ids[0], false).await.unwrap();
    let s = queue.collect_blobs(Duration::ZERO, 100).await.unwrap();
    assert_eq!((s.examined, s.deleted), (3, 1), "{s:?}");
    let load = queue.codec().load(&env).await.unwrap();
    assert!(
        matches!(load, Err(echomq::codec::CodecError::BlobMissing(_))),
        "{object}: {load:?}"
    );
    wait_until(
        "the sweep left the others",
        Duration::from_secs(5),
        async || tracked(&c, q).await == (2, 2),
    )
    .await;
}
