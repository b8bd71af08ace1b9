//! The groups panel (issue 31, docs/groups.md): the queue page and
//! `/api/queues/{queue}` show the busiest groups of one bounded read (counts,
//! paused, limits), group ids HTML-escaped; the group actions (pause,
//! resume, concurrency, rate limit) are guarded as every action is (CSRF
//! token, same origin) and refused on bad input with nothing written.

use crate::support;

use echomq::groups::GroupOptions;
use echomq::{JobOptions, NewJob, Queue};
use echomq_integration_tests::scale::Monitor;
use reqwest::StatusCode;
use serde_json::json;
use support::{csrf_in, fast, start};

async fn add(q: &Queue, gid: &str, n: usize) {
    let jobs = (0..n)
        .map(|_| NewJob {
            name: "g".into(),
            data: json!({}),
            options: JobOptions::new().group(GroupOptions::new(gid)),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_panel_shows_the_busiest_groups_and_acts_on_them() {
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "tenants").await.unwrap();
    // 300 small groups, two big ones, and an id a browser would run.
    for i in 0..300 {
        add(&q, &format!("t{i:03}"), 1).await;
    }
    add(&q, "t005", 40).await;
    add(&q, "t150", 20).await;
    let evil = "<img/src=x/onerror=alert(1)>";
    add(&q, evil, 2).await;
    q.groups().set_concurrency("t005", 3).await.unwrap();

    let c = h.redis.client().await;
    let m = Monitor::start(h.redis.port(), &c).await;
    let v = h.json("/api/queues/tenants").await;
    let html = h.html("/queues/tenants").await;
    let calls = m.take(&c).await;

    let groups = &v["groups"];
    assert_eq!(groups["total"], 301);
    assert_eq!(groups["read"], 200, "one bounded page of the index");
    let rows = groups["groups"].as_array().unwrap();
    assert_eq!(rows.len(), 20, "top 20 only");
    assert_eq!(rows[0]["id"], "t005", "busiest first: {rows:?}");
    assert_eq!(rows[0]["waiting"], 41);
    assert_eq!(rows[0]["concurrency"], 3);
    assert_eq!(rows[1]["id"], "t150");
    assert_eq!(rows[2]["id"], evil, "'<' sorts first in the index");
    // The next page of the index: t199…t299.
    let next = h.json("/api/queues/tenants?groups=200").await;
    assert_eq!(next["groups"]["read"], 101);
    assert_eq!(next["groups"]["groups"][0]["id"], "t199");

    assert!(
        html.contains("Groups (301)"),
        "the panel is on the queue page"
    );
    assert!(html.contains("t005") && html.contains("next groups"));
    assert!(!html.contains(evil), "a group id is escaped");
    assert!(html.contains("&lt;img/src=x/onerror=alert(1)&gt;"));
    // Every read of the two requests is bounded (issue 28).
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

    // Actions: no token, refused; with the session's, run through the queue.
    let s = h.session().await;
    let refused = h
        .api_action(
            "tenants",
            "group-pause",
            json!({"group": "t005"}),
            &[("cookie", s.cookie.clone())],
        )
        .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let cross = h
        .form_action(
            "tenants",
            "group-pause",
            &[("group", "t005"), ("csrf", &s.csrf)],
            &[
                ("cookie", s.cookie.clone()),
                ("origin", "http://evil.example".into()),
            ],
        )
        .await;
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    assert!(!q.groups().counts("t005").await.unwrap().paused);

    let act = async |action: &str, body: serde_json::Value| {
        let r = h.api_action("tenants", action, body, &s.api()).await;
        let status = r.status();
        let v: serde_json::Value = r.json().await.unwrap();
        (status, v)
    };
    let (st, v) = act("group-pause", json!({"group": "t005"})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["result"]["changed"], true);
    assert!(q.groups().counts("t005").await.unwrap().paused);
    let (_, v) = act("group-pause", json!({"group": "t005"})).await;
    assert_eq!(v["result"]["changed"], false, "paused already");
    let (st, _) = act(
        "group-concurrency",
        json!({"group": "t150", "concurrency": 2}),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = act(
        "group-rate-limit",
        json!({"group": "t150", "max": 5, "duration_ms": 1000}),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let t150 = q.groups().counts("t150").await.unwrap();
    assert_eq!(
        (t150.concurrency, t150.rate_limit),
        (Some(2), Some((5, 1000)))
    );
    // Bad input: a 400, nothing written.
    for (action, body) in [
        (
            "group-concurrency",
            json!({"group": "t150", "concurrency": 0}),
        ),
        ("group-rate-limit", json!({"group": "t150", "max": 5})),
        ("group-pause", json!({"group": "a:b"})),
        ("group-resume", json!({})),
    ] {
        let (st, v) = act(action, body).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{action}: {v}");
    }
    let t150 = q.groups().counts("t150").await.unwrap();
    assert_eq!(
        (t150.concurrency, t150.rate_limit),
        (Some(2), Some((5, 1000)))
    );

    // The form path: the confirm page carries the token and the group.
    let confirm = h
        .http
        .get(h.url("/queues/tenants/confirm/group-resume?group=t005"))
        .header("cookie", &s.cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        confirm.contains(r#"name="group" value="t005""#),
        "{confirm}"
    );
    let token = csrf_in(&confirm);
    let r = h
        .form_action(
            "tenants",
            "group-resume",
            &[("group", "t005"), ("csrf", &token)],
            &[("cookie", s.cookie.clone()), ("origin", h.ui.url())],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{:?}", r.text().await);
    assert!(!q.groups().counts("t005").await.unwrap().paused);
}
