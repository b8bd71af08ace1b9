//! Global concurrency, global rate limit and the worker rate limiter
//! (issue 16) against a real Redis: the Queue setters, getters and removal
//! with their refusals, isMaxed and getRateLimitTtl, and Rust workers
//! honouring each limit.

use std::time::Duration;

use echomq::{Error, JobOptions, NewJob, Queue, RateLimit, WorkerOptions};
use echomq_integration_tests::{wait_until, RedisServer};
use fred::prelude::*;
use serde_json::json;

use crate::limits_support;
use echomq_integration_tests::timeline::log_every_command;
use limits_support::{assert_window_budget, redis_peak, redis_starts, timed_worker, Ran};

async fn add_n(q: &Queue, n: usize) {
    let jobs = (0..n)
        .map(|i| NewJob {
            name: "j".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
}

#[tokio::test]
async fn global_limits_are_set_read_and_removed_and_bad_values_write_nothing() {
    let (redis, _conn, q) = RedisServer::with_queue("gl").await;
    let c = redis.client().await;

    assert_eq!(q.limits().get_global_concurrency().await.unwrap(), None);
    assert_eq!(q.limits().get_global_rate_limit().await.unwrap(), None);
    assert!(matches!(
        q.limits().set_global_concurrency(0).await,
        Err(Error::Config(_))
    ));
    let bad = [
        RateLimit {
            max: 0,
            duration: Duration::from_secs(1),
        },
        RateLimit {
            max: 1,
            duration: Duration::ZERO,
        },
    ];
    for limit in bad {
        assert!(matches!(
            q.limits().set_global_rate_limit(limit).await,
            Err(Error::Config(_))
        ));
    }
    let fields: Vec<Option<String>> = c
        .hmget("emq:gl:meta", vec!["concurrency", "max", "duration"])
        .await
        .unwrap();
    assert_eq!(fields, vec![None, None, None], "a refusal writes nothing");

    q.limits().set_global_concurrency(3).await.unwrap();
    let limit = RateLimit {
        max: 10,
        duration: Duration::from_millis(2000),
    };
    q.limits().set_global_rate_limit(limit).await.unwrap();
    let fields: Vec<Option<String>> = c
        .hmget("emq:gl:meta", vec!["concurrency", "max", "duration"])
        .await
        .unwrap();
    assert_eq!(
        fields,
        vec![Some("3".into()), Some("10".into()), Some("2000".into())]
    );
    assert_eq!(q.limits().get_global_concurrency().await.unwrap(), Some(3));
    assert_eq!(
        q.limits().get_global_rate_limit().await.unwrap(),
        Some(limit)
    );

    // isMaxed: active holds at least the global concurrency.
    assert!(!q.limits().is_maxed().await.unwrap());
    let _: () = c.lpush("emq:gl:active", vec!["a", "b", "c"]).await.unwrap();
    assert!(q.limits().is_maxed().await.unwrap());
    q.limits().remove_global_concurrency().await.unwrap();
    assert!(!q.limits().is_maxed().await.unwrap());
    assert_eq!(q.limits().get_global_concurrency().await.unwrap(), None);

    q.limits().remove_global_rate_limit().await.unwrap();
    assert_eq!(q.limits().get_global_rate_limit().await.unwrap(), None);
    let left: Vec<String> = c.hkeys("emq:gl:meta").await.unwrap();
    assert!(
        !left.iter().any(|k| k == "max" || k == "duration"),
        "{left:?}"
    );
}

#[tokio::test]
async fn rate_limit_ttl_follows_the_limiter_key() {
    let (redis, _conn, q) = RedisServer::with_queue("rl").await;
    let c = redis.client().await;

    assert_eq!(
        q.limits().rate_limit_ttl(None).await.unwrap(),
        Duration::ZERO
    );
    assert!(matches!(
        q.limits().rate_limit(Duration::ZERO).await,
        Err(Error::Config(_))
    ));
    q.limits()
        .rate_limit(Duration::from_millis(1500))
        .await
        .unwrap();
    let v: String = c.get("emq:rl:limiter").await.unwrap();
    assert_eq!(v, "9007199254740991", "Node's counter value");
    for max in [None, Some(5)] {
        let ttl = q.limits().rate_limit_ttl(max).await.unwrap();
        assert!(
            ttl > Duration::from_millis(1000) && ttl <= Duration::from_millis(1500),
            "{max:?}: {ttl:?}"
        );
    }
    // A window with budget left is open whatever its expiry.
    let _: () = c
        .set(
            "emq:rl:limiter",
            "1",
            Some(Expiration::PX(1000)),
            None,
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        q.limits().rate_limit_ttl(Some(2)).await.unwrap(),
        Duration::ZERO
    );
    q.limits()
        .set_global_rate_limit(RateLimit {
            max: 1,
            duration: Duration::from_secs(1),
        })
        .await
        .unwrap();
    assert!(q.limits().rate_limit_ttl(None).await.unwrap() > Duration::ZERO);
    assert!(q.limits().remove_rate_limit_key().await.unwrap());
    assert_eq!(
        q.limits().rate_limit_ttl(None).await.unwrap(),
        Duration::ZERO
    );
}

#[tokio::test]
async fn rust_workers_honour_the_global_concurrency() {
    let (redis, _conn, q) = RedisServer::with_queue("gc").await;
    let c = redis.client().await;
    q.limits().set_global_concurrency(2).await.unwrap();
    add_n(&q, 10).await;
    let ran: Ran = Default::default();
    let opts = || {
        WorkerOptions::default()
            .concurrency(4)
            .drain_delay(Duration::from_millis(200))
    };
    let a = timed_worker(&q, opts(), 100, ran.clone()).await;
    let b = timed_worker(&q, opts(), 100, ran.clone()).await;
    wait_until("10 jobs", Duration::from_secs(20), async || {
        q.counts().await.unwrap().completed == 10
    })
    .await;
    a.close().await;
    b.close().await;
    // Jobs in `active` at once, by the events stream (Redis's order).
    let peak = redis_peak(&c, &q).await;
    assert!(peak <= 2, "peak {peak} over the global concurrency of 2");
    assert_eq!(peak, 2, "two slots were in use");
}

#[tokio::test]
async fn rust_workers_share_the_limiter_and_a_global_rate_limit() {
    for global in [false, true] {
        let (redis, _conn, q) = RedisServer::with_queue("lim").await;
        let c = redis.client().await;
        log_every_command(&c).await;
        let limit = RateLimit {
            max: 2,
            duration: Duration::from_millis(400),
        };
        let mut opts = WorkerOptions::default()
            .concurrency(5)
            .drain_delay(Duration::from_millis(200));
        if global {
            q.limits().set_global_rate_limit(limit).await.unwrap();
        } else {
            opts = opts.limiter(limit);
        }
        add_n(&q, 10).await;
        let ran: Ran = Default::default();
        let a = timed_worker(&q, opts.clone(), 5, ran.clone()).await;
        let b = timed_worker(&q, opts, 5, ran.clone()).await;
        wait_until("10 jobs", Duration::from_secs(30), async || {
            q.counts().await.unwrap().completed == 10
        })
        .await;
        a.close().await;
        b.close().await;
        let starts = redis_starts(&c, &q).await;
        assert_eq!(starts.len(), 10, "each job taken once");
        assert_window_budget(&c, &starts, limit, &format!("global={global}")).await;
    }
}
