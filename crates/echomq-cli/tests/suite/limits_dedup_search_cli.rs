//! `echomq limiter`, `concurrency`, `dedup` and `jobs --name/--search`
//! (issue 16) run as the binary against a real Redis: clear refusals that
//! write nothing, and the same meta fields the Queue API writes.

use echomq::{Deduplication, JobOptions, Queue};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::json;

use crate::cli::{ok, refused};

#[tokio::test]
async fn limits_and_dedup_from_the_command_line() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;

    refused(&url, &["limiter", "q", "set", "0/1000"], "at least 1");
    refused(&url, &["limiter", "q", "set", "5/-10"], "at least 1 ms");
    refused(&url, &["limiter", "q", "set", "5"], "MAX/DURATION_MS");
    refused(&url, &["concurrency", "q", "set", "0"], "0");
    refused(&url, &["limiter", "q", "pause", "0"], "at least 1 ms");
    let keys = echomq_integration_tests::keys(&c, "*").await;
    assert!(keys.is_empty(), "a refusal wrote {keys:?}");

    ok(&url, &["limiter", "q", "set", "5/1000"]);
    ok(&url, &["concurrency", "q", "set", "3"]);
    let meta: Vec<Option<String>> = c
        .hmget("emq:q:meta", vec!["max", "duration", "concurrency"])
        .await
        .unwrap();
    assert_eq!(
        meta,
        vec![Some("5".into()), Some("1000".into()), Some("3".into())]
    );
    assert!(ok(&url, &["limiter", "q", "show"]).contains("5/1000 ms"));
    assert!(ok(&url, &["concurrency", "q", "show"]).contains("3"));
    ok(&url, &["limiter", "q", "remove"]);
    ok(&url, &["concurrency", "q", "remove"]);
    let meta: Vec<Option<String>> = c
        .hmget("emq:q:meta", vec!["max", "duration", "concurrency"])
        .await
        .unwrap();
    assert_eq!(meta, vec![None, None, None]);
    ok(&url, &["limiter", "q", "pause", "5000"]);
    let ttl: i64 = c.pttl("emq:q:limiter").await.unwrap();
    assert!(ttl > 4000, "{ttl}");

    let conn = redis.connect().await;
    let q = Queue::new(&conn, "q").await.unwrap();
    q.add(
        "x",
        &json!({}),
        JobOptions::new().deduplication(Deduplication::new("D")),
    )
    .await
    .unwrap();
    assert_eq!(ok(&url, &["dedup", "q", "show", "D"]).trim(), "1");
    assert!(ok(&url, &["dedup", "q", "remove", "D"]).contains("freed"));
    assert!(ok(&url, &["dedup", "q", "show", "D"]).contains("no owner"));
}

#[tokio::test]
async fn jobs_are_found_by_name_and_data_text_across_pages() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "s").await.unwrap();
    // 1200 jobs: more than two scan pages.
    let jobs = (0..1200)
        .map(|i| echomq::NewJob {
            name: if i % 100 == 7 { "mail" } else { "other" }.into(),
            data: json!({ "user": format!("u{i}") }),
            options: JobOptions::new(),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
    let ids = |out: String| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    let by_name = ids(ok(
        &url,
        &[
            "jobs", "s", "waiting", "--name", "mail", "--asc", "--end", "99",
        ],
    ));
    assert_eq!(by_name.len(), 12);
    assert_eq!(by_name[0], "8");
    assert_eq!(by_name[11], "1108");
    let by_text = ids(ok(&url, &["jobs", "s", "waiting", "--search", "\"u1150\""]));
    assert_eq!(by_text, vec!["1151"]);
    let both = ids(ok(
        &url,
        &[
            "jobs", "s", "waiting", "--name", "mail", "--search", "u10", "--asc",
        ],
    ));
    assert_eq!(both, vec!["108", "1008"]);
    // Paging applies to the matches.
    let page = ids(ok(
        &url,
        &[
            "jobs", "s", "waiting", "--name", "mail", "--asc", "--start", "2", "--end", "3",
        ],
    ));
    assert_eq!(page, vec!["208", "308"]);
}
