//! Deduplication and debounce as typed job options (issue 16): the modes of
//! docs/protocol.md §Deduplication through `Queue::add`, the owner getter, the
//! two ways of freeing an id, and the `deduplicated` events.

use std::time::Duration;

use echomq::{Deduplication, Error, JobOptions, JobState};
use echomq_integration_tests::{events, state, timeline, wait_until, RedisServer};
use fred::prelude::*;
use serde_json::{json, Value as Json};

fn dedup(d: Deduplication) -> JobOptions {
    JobOptions::new().deduplication(d)
}

/// The `deduplicated` events of the stream, as (jobId, deduplicationId, deduplicatedJobId).
async fn deduplicated(c: &Client, queue: &str) -> Vec<(String, String, String)> {
    events(c, &format!("emq:{queue}:events"))
        .await
        .into_iter()
        .filter(|(name, _)| name == "deduplicated")
        .map(|(_, f)| {
            let get = |k: &str| f.iter().find(|(n, _)| n == k).unwrap().1.clone();
            (
                get("jobId"),
                get("deduplicationId"),
                get("deduplicatedJobId"),
            )
        })
        .collect()
}

#[tokio::test]
async fn simple_mode_keeps_the_owner_until_the_key_is_freed() {
    let (redis, _conn, q) = RedisServer::with_queue("dd").await;
    let c = redis.client().await;

    let first = q
        .add("a", &json!({"n": 1}), dedup(Deduplication::new("D")))
        .await
        .unwrap();
    assert_eq!(first, "1");
    let again = q
        .add("a", &json!({"n": 2}), dedup(Deduplication::new("D")))
        .await
        .unwrap();
    assert_eq!(again, "1", "the add is dropped in favour of the owner");
    assert_eq!(q.counts().await.unwrap().waiting, 1);
    assert_eq!(
        deduplicated(&c, "dd").await,
        vec![("1".into(), "D".into(), "2".into())]
    );

    // Stored form: `de` in opts, `deid` on the hash, key without expiry.
    let h: std::collections::HashMap<String, String> = c.hgetall("emq:dd:1").await.unwrap();
    assert_eq!(h["deid"], "D");
    let opts: Json = serde_json::from_str(&h["opts"]).unwrap();
    assert_eq!(opts["de"], json!({"id": "D"}));
    let ttl: i64 = c.pttl("emq:dd:de:D").await.unwrap();
    assert_eq!(ttl, -1);
    assert_eq!(
        q.dedup()
            .get_deduplication_job_id("D")
            .await
            .unwrap()
            .as_deref(),
        Some("1")
    );
    assert_eq!(
        q.dedup().get_deduplication_job_id("nope").await.unwrap(),
        None
    );

    // Freed by its owner only: job 1 owns D, so it may free it.
    assert!(q.dedup().remove_job_deduplication_key("1").await.unwrap());
    assert!(!q.dedup().remove_job_deduplication_key("1").await.unwrap());
    assert!(matches!(
        q.dedup().remove_job_deduplication_key("404").await,
        Err(Error::JobNotFound(_))
    ));
    let third = q
        .add("a", &json!({"n": 3}), dedup(Deduplication::new("D")))
        .await
        .unwrap();
    assert_eq!(third, "3", "a freed id lets the next add through");

    // Job 1 no longer owns D (job 3 does): the owner-checked removal refuses,
    // the queue-wide one deletes whoever owns it.
    assert!(!q.dedup().remove_job_deduplication_key("1").await.unwrap());
    assert_eq!(
        q.dedup()
            .get_deduplication_job_id("D")
            .await
            .unwrap()
            .as_deref(),
        Some("3")
    );
    assert!(q.dedup().remove_deduplication_key("D").await.unwrap());
    assert!(!q.dedup().remove_deduplication_key("D").await.unwrap());
    assert_eq!(q.dedup().get_deduplication_job_id("D").await.unwrap(), None);
}

/// Redis's time (ms) of the first `event` of job `id` in queue `queue`'s
/// stream (the last one when `last`).
async fn event_at(c: &Client, queue: &str, event: &str, id: &str, last: bool) -> u64 {
    let stamps = timeline::stamps(c, &format!("emq:{queue}:events")).await;
    let hit = |s: &&timeline::Stamp| s.name == event && s.job_id == id;
    let found = if last {
        stamps.iter().rfind(hit)
    } else {
        stamps.iter().find(hit)
    };
    found
        .unwrap_or_else(|| panic!("no {event} of {id}: {stamps:?}"))
        .at_ms
}

/// Whether a second add falls inside the window depends on how fast the test
/// runs; what must happen to it is decided on Redis's clock (the events'
/// ids), and the case is tried again with a new id until one second add fell
/// inside.
#[tokio::test]
async fn throttle_mode_expires_with_the_ttl() {
    const TTL: u64 = 300;
    let (redis, _conn, q) = RedisServer::with_queue("th").await;
    let c = redis.client().await;
    timeline::log_every_command(&c).await;
    // An entry's id is its XADD's millisecond. The key's expiry was set
    // earlier in the same script and its check made at the script's start,
    // so an id may be later than either by up to the script's run (ms,
    // rounded up; longer when the OS descheduled Redis), and 1 ms for the
    // rounding.
    let slack = async || 1 + timeline::longest_script_us(&c).await.div_ceil(1000);
    for n in 0..20 {
        let d = format!("T{n}");
        let opts = || dedup(Deduplication::new(&d).ttl(Duration::from_millis(TTL)));
        let owner = q.add("a", &json!(1), opts()).await.unwrap();
        let ttl: i64 = c.pttl(format!("emq:th:de:{d}")).await.unwrap();
        assert!(ttl <= TTL as i64, "ttl {ttl}");
        let added = event_at(&c, "th", "added", &owner, false).await;
        let second = q.add("a", &json!(2), opts()).await.unwrap();
        if second != owner {
            let at = event_at(&c, "th", "added", &second, false).await;
            assert!(
                at + slack().await >= added + TTL,
                "an add {} ms into the {TTL} ms window was not deduplicated",
                at - added
            );
            continue;
        }
        let at = event_at(&c, "th", "deduplicated", &owner, true).await;
        assert!(
            at <= added + TTL + slack().await,
            "deduplicated {} ms after the owner's add, past its window",
            at - added
        );
        let dropped: u64 = owner.parse::<u64>().unwrap() + 1;
        assert!(deduplicated(&c, "th").await.contains(&(
            owner.clone(),
            d.clone(),
            dropped.to_string()
        )));
        // The window ends with the key; the next add is a new job, and it
        // came no earlier than the TTL after the owner's.
        wait_until("the key expires", Duration::from_secs(5), async || {
            !state::exists(&c, &format!("emq:th:de:{d}")).await
        })
        .await;
        let third = q.add("a", &json!(3), opts()).await.unwrap();
        assert_eq!(third, (dropped + 1).to_string());
        let at = event_at(&c, "th", "added", &third, false).await;
        assert!(
            at + slack().await >= added + TTL,
            "the key expired {} ms early",
            added + TTL - at
        );
        return;
    }
    panic!("no second add fell inside a {TTL} ms window in 20 tries");
}

/// As for throttling, Redis's clock decides what each add must do; the case
/// is tried again with a new id until a chain of dropped adds outlived the
/// first add's own window.
#[tokio::test]
async fn debounce_mode_restarts_the_window_on_every_dropped_add() {
    const TTL: u64 = 400;
    let (redis, _conn, q) = RedisServer::with_queue("db").await;
    let c = redis.client().await;
    'attempt: for n in 0..10 {
        let d = format!("B{n}");
        let opts = || {
            dedup(
                Deduplication::new(&d)
                    .ttl(Duration::from_millis(TTL))
                    .extend(true),
            )
        };
        let owner = q.add("a", &json!(1), opts()).await.unwrap();
        let first = event_at(&c, "db", "added", &owner, false).await;
        let mut prev = first;
        for _ in 0..3 {
            // The cadence is the phenomenon: adds arriving while the window
            // runs, each (when it is in time) restarting it.
            tokio::time::sleep(Duration::from_millis(250)).await;
            let id = q.add("a", &json!(0), opts()).await.unwrap();
            if id != owner {
                let at = event_at(&c, "db", "added", &id, false).await;
                assert!(
                    at + 1 >= prev + TTL,
                    "an add {} ms into a restarted window was not deduplicated",
                    at - prev
                );
                continue 'attempt;
            }
            let at = event_at(&c, "db", "deduplicated", &owner, true).await;
            assert!(at <= prev + TTL + 1, "deduplicated past the window");
            let ttl: i64 = c.pttl(format!("emq:db:de:{d}")).await.unwrap();
            assert!(ttl <= TTL as i64, "the window restarted: {ttl}");
            prev = at;
        }
        // Still owned by the first add when dropping the last one, 750 ms or
        // more after it on Redis's clock: past its own 400 ms window.
        assert!(prev >= first + 750, "{} ms", prev - first);
        let dropped: Vec<_> = deduplicated(&c, "db")
            .await
            .into_iter()
            .filter(|e| e.1 == d)
            .collect();
        assert_eq!(dropped.len(), 3);
        assert!(dropped.iter().all(|e| e.0 == owner));
        return;
    }
    panic!("no chain of dropped adds stayed inside its windows in 10 tries");
}

#[tokio::test]
async fn replace_mode_swaps_a_delayed_owner_for_the_newest_add() {
    let (redis, _conn, q) = RedisServer::with_queue("rp").await;
    let c = redis.client().await;
    let opts = |n: u64| {
        dedup(
            Deduplication::new("R")
                .ttl(Duration::from_millis(5_000))
                .extend(true)
                .replace(true),
        )
        .delay(Duration::from_millis(10_000 + n))
    };

    assert_eq!(q.add("a", &json!({"v": 1}), opts(1)).await.unwrap(), "1");
    assert_eq!(q.add("a", &json!({"v": 2}), opts(2)).await.unwrap(), "2");
    assert!(
        q.get_job("1").await.unwrap().is_none(),
        "the delayed owner is gone"
    );
    assert_eq!(q.get_job_state("2").await.unwrap(), JobState::Delayed);
    assert_eq!(
        q.dedup()
            .get_deduplication_job_id("R")
            .await
            .unwrap()
            .as_deref(),
        Some("2")
    );
    assert_eq!(
        deduplicated(&c, "rp").await,
        vec![("2".into(), "R".into(), "1".into())],
        "the new job is the owner, the replaced one the deduplicated"
    );
    let names: Vec<String> = events(&c, "emq:rp:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"removed".to_string()), "{names:?}");
}

#[tokio::test]
async fn a_bad_deduplication_is_refused_before_any_write() {
    let (redis, _conn, q) = RedisServer::with_queue("bad").await;
    let c = redis.client().await;
    let err = q
        .add("a", &json!(1), dedup(Deduplication::new("")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Validation(_)), "{err}");
    let mut debounce = JobOptions::new();
    debounce.extra.insert("debounce".into(), json!({"id": "x"}));
    assert!(matches!(
        q.add("a", &json!(1), debounce).await,
        Err(Error::Validation(_))
    ));
    let id: Option<String> = c.get("emq:bad:id").await.unwrap();
    assert_eq!(id, None, "no id was taken");
}
