//! The dead letters panel (issue 45, docs/operations.md §Dead letters): a
//! dead-letter queue's page lists its dead letters with their counts by
//! source and class; replaying one, or those matching a filter, goes through
//! the guarded action flow (CSRF token, same origin), and a replay of
//! nothing is refused with nothing moved.

use crate::support;

use std::time::Duration;

use echomq::dead_letter::DeadLetterQueue;
use echomq::worker::{processor_fn, JobContext};
use echomq::{JobOptions, Queue, WorkerArgs, WorkerOptions};
use echomq_integration_tests::{behave, wait_until, NullSupervisor};
use ractor::Actor;
use reqwest::StatusCode;
use serde_json::json;
use support::{csrf_in, fast, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letters_panel_lists_and_replays_through_the_guarded_actions() {
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "pay").await.unwrap();
    let dlq = Queue::new(&h.conn, "pay-dead").await.unwrap();
    for (name, reason) in [
        ("charge", "card <b>declined</b>"),
        ("charge", "timeout"),
        ("refund", "no"),
    ] {
        q.add(
            name,
            &json!({"mode": "fail", "reason": reason}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    }
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(|job: JobContext| async move { behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default().dead_letter(DeadLetterQueue::new("pay-dead"));
    let (worker, _lm) = echomq_integration_tests::spawn_worker(sup.get_cell(), args)
        .await
        .unwrap();
    wait_until("3 dead letters", Duration::from_secs(20), async || {
        dlq.dead_letters().count().await.unwrap() == 3
    })
    .await;
    worker.stop(None);

    let html = h.html("/queues/pay-dead").await;
    assert!(html.contains("Dead letters (3)"), "{html}");
    assert!(html.contains("pay · error: 3"), "{html}");
    assert!(
        html.contains("card &lt;b&gt;declined&lt;/b&gt;"),
        "a reason is escaped"
    );
    assert!(!h.html("/queues/pay").await.contains("Dead letters ("));

    let letters = dlq
        .dead_letters()
        .list(
            &echomq::dead_letter::DeadLetterFilter::all().name("refund"),
            1,
        )
        .await
        .unwrap();
    let refund = letters[0].id.clone();
    let s = h.session().await;
    let refused = h
        .api_action(
            "pay-dead",
            "dlq-replay",
            json!({"job": refund}),
            &[("cookie", s.cookie.clone())],
        )
        .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 3);

    let r = h
        .api_action("pay-dead", "dlq-replay", json!({"job": refund}), &s.api())
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["result"]["id"], letters[0].source_id);
    assert_eq!(q.counts().await.unwrap().waiting, 1);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 2);
    let again = h
        .api_action("pay-dead", "dlq-replay", json!({"job": refund}), &s.api())
        .await;
    assert_eq!(again.status(), StatusCode::NOT_FOUND, "replayed already");
    let none = h
        .api_action(
            "pay-dead",
            "dlq-replay-matching",
            json!({"name": "nothing", "limit": 10}),
            &s.api(),
        )
        .await;
    assert_eq!(none.status(), StatusCode::CONFLICT);
    assert_eq!(
        dlq.dead_letters().count().await.unwrap(),
        2,
        "nothing moved"
    );

    // The form path: the confirm page carries the token.
    let confirm = h
        .http
        .get(h.url("/queues/pay-dead/confirm/dlq-replay-matching"))
        .header("cookie", &s.cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let token = csrf_in(&confirm);
    let r = h
        .form_action(
            "pay-dead",
            "dlq-replay-matching",
            &[("reason", "declined"), ("limit", "5"), ("csrf", &token)],
            &[("cookie", s.cookie.clone()), ("origin", h.ui.url())],
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{:?}", r.text().await);
    assert_eq!(q.counts().await.unwrap().waiting, 2);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 1);
}
