//! The dashboard's reads stay bounded per request on a large prefix (counts,
//! from `MONITOR`): discovery takes a bounded number of SCAN steps per
//! request (the walk goes on over requests), the overview summarises a page
//! of queues with O(1) reads each, and a queue page reads one page of jobs.

use crate::support;

use std::time::Duration;

use echomq_integration_tests::scale::{fill, Monitor};
use echomq_ui::UiConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_and_queue_pages_read_a_bounded_amount_per_request() {
    // The sampler ticks once at start, then not within the test.
    let h = support::start(
        UiConfig::default()
            .bind("127.0.0.1:0".parse().unwrap())
            .sample_every(Duration::from_secs(3600)),
    )
    .await;
    let c = h.redis.client().await;
    // One big queue (60 000 jobs, 120 000 keys with the counter) and 60
    // small ones.
    fill(&c, "big", 30_000, 30_000, "{}").await;
    for i in 0..60 {
        fill(&c, &format!("q{i:02}"), 1, 0, "{}").await;
    }
    let m = Monitor::start(h.redis.port(), &c).await;
    // The walk needs ~120 SCAN steps of 1000: a request takes at most 10,
    // so the list fills in over requests.
    let mut requests = 0;
    let mut first_total = None;
    let mut calls = Vec::new();
    // SCAN steps per discovery request, from the monitor's window around it.
    let mut steps = Vec::new();
    let listed = loop {
        let v = h.json("/api/queues").await;
        let window = m.take(&c).await;
        steps.push(window.iter().filter(|c| c.command == "SCAN").count());
        calls.extend(window);
        requests += 1;
        first_total.get_or_insert(v["total"].as_u64().unwrap());
        if !v["partial"].as_bool().unwrap() && v["total"] == 61 {
            break v;
        }
        assert!(requests < 200, "discovery never completed: {v}");
    };
    assert_eq!(
        listed["queues"].as_array().unwrap().len(),
        50,
        "a page of 50"
    );
    let page2 = h.json("/api/queues?page=1").await;
    assert_eq!(page2["queues"].as_array().unwrap().len(), 11);
    let html = h.html("/").await;
    assert!(html.contains("of 61"), "the pager says how many");
    let page = h
        .json("/api/queues/big/jobs?state=waiting&page=3&size=50")
        .await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 50);
    assert_eq!(page["total"], 30_000);
    let _ = h.html("/queues/big?state=completed").await;
    calls.extend(m.take(&c).await);

    let scans: Vec<_> = calls.iter().filter(|c| c.command == "SCAN").collect();
    // At most 10 steps per request (docs/scale.md); the sampler's one tick
    // at start (100 steps at most) may fall in one request's window.
    let over: Vec<usize> = steps.iter().copied().filter(|n| *n > 10).collect();
    assert!(
        over.len() <= 1 && over.iter().all(|n| *n <= 110),
        "SCAN steps per request: {steps:?}"
    );
    assert!(
        steps.iter().filter(|n| **n > 0).count() > 1,
        "the walk spanned requests"
    );
    for s in &scans {
        let count = s
            .args
            .iter()
            .position(|a| a.eq_ignore_ascii_case("COUNT"))
            .and_then(|i| s.args.get(i + 1))
            .and_then(|n| n.parse::<u64>().ok());
        assert!(count.is_some_and(|n| n <= 1000), "{:?}", s.args);
    }
    assert!(
        first_total.unwrap() < 61,
        "the first request did not walk everything"
    );
    // Counts per listed queue: a few commands each, never a page of jobs.
    for call in &calls {
        for (name, args) in &call.inner {
            if matches!(name.as_str(), "LRANGE" | "ZRANGE" | "ZREVRANGE") {
                let n = echomq_integration_tests::scale::range_of(name, args);
                assert!(n.is_some_and(|n| n <= 200), "{name} {args:?}");
            }
        }
        assert!(
            call.inner.len() <= 2000,
            "{} {:?}: {} commands",
            call.command,
            &call.args[..2.min(call.args.len())],
            call.inner.len()
        );
    }
}
