//! The queue-wide commands of the CLI (`clean`, `retry --all`, `promote
//! --all`, `drain`, `obliterate`) on a queue far larger than a chunk: each
//! does all of its work, and every call it makes — and every command a
//! script runs inside it — touches at most a chunk (docs/scale.md). The
//! real binary against a real redis-server, every command recorded with
//! `MONITOR`.

use std::process::Output;

use echomq_integration_tests::scale::{fill, range_of, Call, Monitor};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;

const CHUNK: usize = echomq::queue::DEFAULT_CHUNK as usize;

fn echomq(url: &str, args: &[&str]) -> Output {
    let out = crate::cli::run(url, args);
    assert!(
        out.status.success(),
        "echomq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Asserts every call of `what` is bounded by a chunk and returns the
/// number of script calls it made.
fn bounded(what: &str, calls: &[Call]) -> usize {
    let mut scripts = 0;
    for call in calls {
        let own = std::iter::once((call.command.clone(), call.args.clone()));
        for (command, args) in own.chain(call.inner.iter().cloned()) {
            assert!(
                !matches!(command.as_str(), "KEYS" | "SMEMBERS" | "HGETALL"),
                "{what}: {command} {args:?}"
            );
            if matches!(command.as_str(), "LRANGE" | "ZRANGE" | "ZREVRANGE") {
                let n = range_of(&command, &args);
                assert!(
                    n.is_some_and(|n| n <= CHUNK as i64),
                    "{what}: {command} {args:?}"
                );
            }
            if command == "ZRANGEBYSCORE" {
                assert!(
                    args.iter().any(|a| a.eq_ignore_ascii_case("LIMIT")),
                    "{what}: {command} {args:?}"
                );
            }
        }
        if matches!(call.command.as_str(), "EVALSHA" | "EVAL") {
            scripts += 1;
            // A few commands per job of the chunk, never per job of the queue.
            assert!(
                call.inner.len() <= 12 * CHUNK + 50,
                "{what}: {} commands in one call",
                call.inner.len()
            );
        }
    }
    scripts
}

/// Moves `n` completed jobs to `failed`, and `n` more to `delayed`, as a
/// worker's failure and a delay would leave them.
async fn failed_and_delayed(c: &Client, n: usize) {
    let script = r#"
      local ids = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[1]) * 2 - 1)
      for i, id in ipairs(ids) do
        redis.call("ZREM", KEYS[1], id)
        if i <= tonumber(ARGV[1]) then
          redis.call("HSET", KEYS[4] .. id, "failedReason", "boom", "attemptsMade", "1")
          redis.call("HDEL", KEYS[4] .. id, "returnvalue")
          redis.call("ZADD", KEYS[2], 1700000000000, id)
        else
          redis.call("HDEL", KEYS[4] .. id, "finishedOn", "processedOn", "returnvalue")
          redis.call("HSET", KEYS[4] .. id, "delay", "3600000")
          redis.call("ZADD", KEYS[3], (1700000000000 + 3600000) * 4096, id)
        end
      end
      return #ids"#;
    let moved: i64 = c
        .eval(
            script,
            vec!["emq:q:completed", "emq:q:failed", "emq:q:delayed", "emq:q:"],
            vec![n.to_string()],
        )
        .await
        .unwrap();
    assert_eq!(moved as usize, 2 * n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_wide_commands_work_a_chunk_per_call() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;
    fill(&c, "q", 12_000, 14_000, r#"{"n":1}"#).await;
    failed_and_delayed(&c, 3_500).await;
    // 12 000 waiting, 7 000 completed, 3 500 failed, 3 500 delayed.
    let m = Monitor::start(redis.port(), &c).await;

    let out = echomq(&url, &["clean", "q", "completed", "--limit", "0"]);
    assert_eq!(stdout(&out), "cleaned 7000");
    assert!(bounded("clean", &m.take(&c).await) >= 7000 / CHUNK);
    assert_eq!(c.zcard::<u64, _>("emq:q:completed").await.unwrap(), 0);

    let out = echomq(&url, &["retry", "q", "--all"]);
    assert_eq!(stdout(&out), "retried 3500");
    assert!(bounded("retry --all", &m.take(&c).await) >= 3500 / CHUNK);
    assert_eq!(c.zcard::<u64, _>("emq:q:failed").await.unwrap(), 0);

    let out = echomq(&url, &["promote", "q", "--all"]);
    assert_eq!(stdout(&out), "promoted 3500");
    assert!(bounded("promote --all", &m.take(&c).await) >= 3500 / CHUNK);
    assert_eq!(c.zcard::<u64, _>("emq:q:delayed").await.unwrap(), 0);
    assert_eq!(c.llen::<u64, _>("emq:q:wait").await.unwrap(), 19_000);

    let out = echomq(&url, &["drain", "q"]);
    assert_eq!(stdout(&out), "drained 19000 jobs");
    assert!(bounded("drain", &m.take(&c).await) >= 19000 / CHUNK);
    assert_eq!(c.llen::<u64, _>("emq:q:wait").await.unwrap(), 0);

    // Something to obliterate: fresh jobs in two states.
    fill(&c, "q", 6_000, 4_000, r#"{"n":1}"#).await;
    let _ = m.take(&c).await;
    let out = echomq(&url, &["obliterate", "q"]);
    assert_eq!(stdout(&out), "obliterated q");
    assert!(bounded("obliterate", &m.take(&c).await) >= 10000 / CHUNK);
    let left: Vec<String> = c
        .eval(
            "return redis.call('KEYS', ARGV[1])",
            Vec::<String>::new(),
            vec!["emq:q:*"],
        )
        .await
        .unwrap();
    assert!(left.is_empty(), "left after obliterate: {left:?}");
}
