//! The dashboard against a real redis-server over HTTP: numbers of queues
//! that BullMQ Node wrote, escaping, the CSRF/origin/auth guards, read-only
//! mode, the prefix fence, the actions, and the live feed.

use crate::support;

use echomq::{JobOptions, Queue};
use echomq_integration_tests::bullmq;
use reqwest::StatusCode;
use serde_json::json;
use support::*;

/// Node adds a mix and fails a job; the API and the pages show the same
/// numbers BullMQ's own getters give.
#[tokio::test(flavor = "multi_thread")]
async fn api_shows_queues_bullmq_node_wrote() {
    let h = start(fast()).await;
    let url = h.redis.url();
    let ids = bullmq("add-mix", &url, "mix", json!({}));
    assert_eq!(ids.as_array().unwrap().len(), 6);
    bullmq(
        "ops",
        &url,
        "failing",
        json!({"ops": [["add", "boom", {"mode": "fail", "reason": "kaput"}], ["work"]]}),
    );
    let node_counts = bullmq("counts", &url, "mix", json!({}));

    let all = h.json("/api/queues").await;
    assert_eq!(all["prefix"], "emq");
    let mix = queue_of(&all, "mix").expect("mix is listed");
    for state in [
        "waiting",
        "delayed",
        "prioritized",
        "active",
        "completed",
        "failed",
    ] {
        assert_eq!(mix["counts"][state], node_counts[state], "{state}");
    }
    assert_eq!(mix["counts"]["waiting"], 4);
    assert_eq!(mix["paused"], false);
    let failing = queue_of(&all, "failing").expect("failing is listed");
    assert_eq!(failing["counts"]["failed"], 1);

    let page = h.json("/api/queues/failing/jobs?state=failed").await;
    assert_eq!(page["total"], 1);
    let job = &page["jobs"][0];
    assert_eq!(job["name"], "boom");
    assert_eq!(job["failedReason"], "kaput");
    let id = job["id"].as_str().unwrap();
    let detail = h.json(&format!("/api/queues/failing/jobs/{id}")).await;
    assert_eq!(detail["state"], "failed");
    assert_eq!(detail["attemptsMade"], 1);
    assert!(detail["stacktrace"][0].as_str().unwrap().contains("kaput"));

    // Paging: 4 waiting jobs, pages of 3.
    let p0 = h.json("/api/queues/mix/jobs?state=waiting&size=3").await;
    let p1 = h
        .json("/api/queues/mix/jobs?state=waiting&size=3&page=1")
        .await;
    assert_eq!(
        (
            p0["jobs"].as_array().unwrap().len(),
            p1["jobs"].as_array().unwrap().len()
        ),
        (3, 1)
    );
    assert_eq!(p0["total"], 4);

    // Search by name, by text in data, by id.
    let by_name = h.json("/api/queues/mix/search?field=name&q=prio").await;
    assert_eq!(by_name["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(by_name["jobs"][0]["state"], "prioritized");
    assert!(by_name["next"].is_null());
    let by_data = h
        .json("/api/queues/mix/search?field=data&q=%22n%22%3A5")
        .await;
    assert_eq!(by_data["jobs"][0]["id"], "custom-1");
    let by_id = h.json("/api/queues/mix/search?field=id&q=custom-1").await;
    assert_eq!(by_id["jobs"][0]["name"], "custom");

    // The HTML shows the same.
    let overview = h.html("/").await;
    assert!(overview.contains(r#"href="/queues/mix""#));
    let q = h.html("/queues/failing?state=failed").await;
    assert!(q.contains("kaput"));
    let j = h.html(&format!("/queues/failing/jobs/{id}")).await;
    assert!(j.contains(r#"data-state="failed""#));
}

/// A search reads at most its budget and says where to go on.
#[tokio::test(flavor = "multi_thread")]
async fn search_cost_is_bounded() {
    let h = start(fast().search_budget(50)).await;
    let q = Queue::new(&h.conn, "many").await.unwrap();
    for i in 0..120 {
        q.add(
            "n",
            &json!({"i": i, "tag": if i == 5 { "needle" } else { "hay" }}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    }
    let mut cursor: Option<String> = None;
    let (mut found, mut requests) = (Vec::new(), 0);
    loop {
        let path = match &cursor {
            Some(c) => {
                format!("/api/queues/many/search?field=data&q=needle&state=waiting&cursor={c}")
            }
            None => "/api/queues/many/search?field=data&q=needle&state=waiting".into(),
        };
        let r = h.json(&path).await;
        requests += 1;
        assert!(r["scanned"].as_u64().unwrap() <= 50);
        found.extend(
            r["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["data"]["i"].clone()),
        );
        match r["next"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(found, vec![json!(5)]);
    assert_eq!(requests, 3, "120 jobs at 50 per request");
}

const XSS_NAME: &str = r#""><img src=x onerror=alert(1)>"#;
const XSS_DATA: &str = "<script>alert(1)</script>";

/// Names and data are text on every page, never markup.
#[tokio::test(flavor = "multi_thread")]
async fn job_names_and_data_are_escaped() {
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "xss").await.unwrap();
    let id = q
        .add(XSS_NAME, &json!({ "x": XSS_DATA }), JobOptions::new())
        .await
        .unwrap();
    q.add_log(&id, XSS_DATA, None).await.unwrap();
    let evil_queue = Queue::new(&h.conn, "<b>q</b>").await.unwrap();
    evil_queue
        .add("n", &json!({}), JobOptions::new())
        .await
        .unwrap();

    let pages = [
        h.html("/").await,
        h.html("/queues/xss").await,
        h.html(&format!("/queues/xss/jobs/{id}")).await,
        h.html("/queues/xss/search?field=data&q=script").await,
        h.html(&format!(
            "/queues/xss/search?field=name&q={}",
            enc(XSS_NAME)
        ))
        .await,
        h.html(&format!("/queues/xss/confirm/retry?job={}", enc(XSS_DATA)))
            .await,
    ];
    for (i, page) in pages.iter().enumerate() {
        assert!(
            !page.contains("<script>alert"),
            "page {i} has a live script tag"
        );
        assert!(!page.contains("<img src=x"), "page {i} has a live img tag");
        assert!(!page.contains("<b>q</b>"), "page {i} has a live b tag");
    }
    assert!(pages[2].contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(pages[2].contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    assert!(pages[1].contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    assert!(pages[0].contains("&lt;b&gt;q&lt;/b&gt;"));
    assert!(pages[3].contains(&id), "the search finds the job");
    assert!(pages[4].contains(&id), "the name search finds the job");
    // The JSON API carries the data as it is (JSON is not HTML).
    let j = h.json(&format!("/api/queues/xss/jobs/{id}")).await;
    assert_eq!(j["data"]["x"], XSS_DATA);
    assert_eq!(j["name"], XSS_NAME);
    // Pages forbid inline scripts outright.
    let r = h.get("/").await;
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"));
}

/// Every action POST needs the session's CSRF token and a same-origin
/// request.
#[tokio::test(flavor = "multi_thread")]
async fn actions_need_the_csrf_token_and_same_origin() {
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "guarded").await.unwrap();
    let s = h.session().await;
    let paused = async || q.is_paused().await.unwrap();

    // API: no cookie, cookie without token, wrong token.
    let no_cookie = h.api_action("guarded", "pause", json!({}), &[]).await;
    assert_eq!(no_cookie.status(), StatusCode::FORBIDDEN);
    let no_token = h
        .api_action(
            "guarded",
            "pause",
            json!({}),
            &[("cookie", s.cookie.clone())],
        )
        .await;
    assert_eq!(no_token.status(), StatusCode::FORBIDDEN);
    let wrong = h
        .api_action(
            "guarded",
            "pause",
            json!({}),
            &[
                ("cookie", s.cookie.clone()),
                ("x-csrf-token", "nope".into()),
            ],
        )
        .await;
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    // Another session's token is no good either.
    let other = h.session().await;
    let swapped = h
        .api_action(
            "guarded",
            "pause",
            json!({}),
            &[
                ("cookie", s.cookie.clone()),
                ("x-csrf-token", other.csrf.clone()),
            ],
        )
        .await;
    assert_eq!(swapped.status(), StatusCode::FORBIDDEN);
    // Without a configured token a bearer header is no way around CSRF.
    let bearer = h
        .api_action(
            "guarded",
            "pause",
            json!({}),
            &[
                ("cookie", s.cookie.clone()),
                ("authorization", "Bearer whatever-whatever-whatever".into()),
            ],
        )
        .await;
    assert_eq!(bearer.status(), StatusCode::FORBIDDEN);
    assert!(!paused().await);

    // Form: the confirm page carries the token; without it, refused.
    let confirm = {
        let r = h
            .http
            .get(h.url("/queues/guarded/confirm/pause"))
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
        r.text().await.unwrap()
    };
    assert_eq!(csrf_in(&confirm), s.csrf);
    assert!(confirm.contains(r#"action="/queues/guarded/actions/pause""#));
    let bare = h
        .form_action("guarded", "pause", &[], &[("cookie", s.cookie.clone())])
        .await;
    assert_eq!(bare.status(), StatusCode::FORBIDDEN);
    // Right token from a foreign origin: refused.
    let origin = h.ui.url();
    let cross = h
        .form_action(
            "guarded",
            "pause",
            &[("csrf", &s.csrf)],
            &[
                ("cookie", s.cookie.clone()),
                ("origin", "http://evil.example".into()),
            ],
        )
        .await;
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    let cross_site = h
        .form_action(
            "guarded",
            "pause",
            &[("csrf", &s.csrf)],
            &[
                ("cookie", s.cookie.clone()),
                ("sec-fetch-site", "cross-site".into()),
            ],
        )
        .await;
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    assert!(!paused().await);

    // Same origin with the token: done, and back to the queue page.
    let ok = h
        .form_action(
            "guarded",
            "pause",
            &[("csrf", &s.csrf)],
            &[("cookie", s.cookie.clone()), ("origin", origin.clone())],
        )
        .await;
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert!(ok.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/queues/guarded?done="));
    assert!(paused().await);
    let api_ok = h.api_action("guarded", "resume", json!({}), &s.api()).await;
    assert_eq!(api_ok.status(), StatusCode::OK);
    assert!(!paused().await);

    // Cookies are HttpOnly and SameSite=Strict.
    let r = h.get("/").await;
    let set = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    // Without a token the dashboard answers only to loopback names (DNS rebinding).
    let rebound = h
        .http
        .get(h.url("/api/queues"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
}

/// `--read-only`: no action is offered and the server refuses them all.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_hides_and_refuses_every_action() {
    let h = start(fast().read_only(true)).await;
    let q = Queue::new(&h.conn, "ro").await.unwrap();
    let id = q.add("a", &json!({}), JobOptions::new()).await.unwrap();
    let s = h.session().await;
    for page in [
        h.html("/").await,
        h.html("/queues/ro").await,
        h.html(&format!("/queues/ro/jobs/{id}")).await,
    ] {
        assert!(
            !page.contains("/confirm/"),
            "an action link in read-only mode"
        );
        assert!(
            !page.contains("/actions/"),
            "an action form in read-only mode"
        );
        assert!(page.contains("read-only"));
    }
    assert_eq!(
        h.get("/queues/ro/confirm/pause").await.status(),
        StatusCode::FORBIDDEN
    );
    for action in ["pause", "drain", "retry-failed"] {
        let r = h.api_action("ro", action, json!({}), &s.api()).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{action}");
        let f = h
            .form_action(
                "ro",
                action,
                &[("csrf", &s.csrf)],
                &[("cookie", s.cookie.clone())],
            )
            .await;
        assert_eq!(f.status(), StatusCode::FORBIDDEN, "{action}");
    }
    let r = h
        .api_action("ro", "remove", json!({"job": id}), &s.api())
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(!q.is_paused().await.unwrap());
    assert_eq!(q.counts().await.unwrap().waiting, 1);
}

/// Off loopback a token is required; with a token every request needs it
/// (bearer, or the login cookie).
#[tokio::test(flavor = "multi_thread")]
async fn auth_token_is_required_off_loopback_and_enforced() {
    let redis = echomq_integration_tests::RedisServer::start();
    let conn = redis.connect().await;
    let open = echomq_ui::UiConfig::default().bind("0.0.0.0:0".parse().unwrap());
    let err = echomq_ui::start(conn.clone(), open).await.unwrap_err();
    assert!(
        matches!(
            err,
            echomq_ui::UiError::Config(echomq_ui::ConfigError::TokenRequired { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--auth-token"));

    const TOKEN: &str = "a-long-enough-secret-token";
    let token = echomq_ui::AuthToken::new(TOKEN).unwrap();
    let config = fast().auth_token(Some(token));
    assert!(!format!("{config:?}").contains(TOKEN));
    let h = Harness {
        ui: echomq_ui::start(conn.clone(), config).await.unwrap(),
        conn,
        redis,
        http: client(),
    };
    Queue::new(&h.conn, "locked").await.unwrap();
    assert_eq!(
        h.get("/api/queues").await.status(),
        StatusCode::UNAUTHORIZED
    );
    let wrong = h
        .http
        .get(h.url("/api/queues"))
        .bearer_auth("not-the-token-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let right = h
        .http
        .get(h.url("/api/queues"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), StatusCode::OK);
    // A script with the bearer token needs no CSRF token.
    let act = h
        .http
        .post(h.url("/api/queues/locked/actions/pause"))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(act.status(), StatusCode::OK);

    // A browser is sent to the login page, which sets the session cookie.
    let home = h.get("/").await;
    assert_eq!(home.status(), StatusCode::SEE_OTHER);
    assert_eq!(home.headers()["location"], "/login");
    let login = h.get("/login").await;
    let cookie = session_cookie(login.headers()).unwrap();
    let csrf = csrf_in(&login.text().await.unwrap());
    let post = async |token: &str| {
        h.http
            .post(h.url("/login"))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={}&csrf={}", enc(token), enc(&csrf)))
            .send()
            .await
            .unwrap()
    };
    let bad = post("wrong-wrong-wrong-wrong").await;
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    assert!(!bad.text().await.unwrap().contains(TOKEN));
    let good = post(TOKEN).await;
    assert_eq!(good.status(), StatusCode::SEE_OTHER);
    let logged_in = session_cookie(good.headers()).expect("a new session id after login");
    assert_ne!(logged_in, cookie, "the session id changes at login");
    let page = h
        .http
        .get(h.url("/queues/locked"))
        .header("cookie", &logged_in)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let body = page.text().await.unwrap();
    assert!(body.contains("paused"));
    assert!(!body.contains(TOKEN), "the token never reaches a page");
    // The old, pre-login session is worth nothing.
    let stale = h
        .http
        .get(h.url("/queues/locked"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::SEE_OTHER);
}

/// Nothing outside the prefix is shown or touched.
#[tokio::test(flavor = "multi_thread")]
async fn no_queue_outside_the_prefix() {
    let h = start(fast()).await;
    let other = other_prefix(&h.redis).await;
    let secret = Queue::new(&other, "secret").await.unwrap();
    let id = secret
        .add("s", &json!({}), JobOptions::new())
        .await
        .unwrap();
    Queue::new(&h.conn, "mine").await.unwrap();
    let s = h.session().await;

    let all = h.json("/api/queues").await;
    assert!(queue_of(&all, "mine").is_some());
    assert!(queue_of(&all, "secret").is_none());
    assert_eq!(
        h.get("/api/queues/secret").await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.get(&format!("/queues/secret/jobs/{id}")).await.status(),
        StatusCode::NOT_FOUND
    );
    for (action, body) in [
        ("pause", json!({})),
        ("drain", json!({})),
        ("remove", json!({"job": id})),
    ] {
        let r = h.api_action("secret", action, body, &s.api()).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{action}");
    }
    // Names that would leave the queue's key space are refused.
    let r = h
        .api_action("other%3Asecret", "pause", json!({}), &s.api())
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(!secret.is_paused().await.unwrap());
    assert_eq!(secret.counts().await.unwrap().waiting, 1);
    other.close().await;
}

/// Each action through the API, checked against the queue's state.
#[tokio::test(flavor = "multi_thread")]
async fn actions_run_through_the_queue() {
    let h = start(fast()).await;
    let url = h.redis.url();
    bullmq(
        "ops",
        &url,
        "ops",
        json!({"ops": [
            ["add", "bad", {"mode": "fail", "reason": "r1"}],
            ["add", "bad", {"mode": "fail", "reason": "r2"}],
            ["add", "bad", {"mode": "fail", "reason": "r3"}],
            ["work"]
        ]}),
    );
    let q = Queue::new(&h.conn, "ops").await.unwrap();
    let s = h.session().await;
    let act = async |action: &str, body: serde_json::Value| {
        let r = h.api_action("ops", action, body, &s.api()).await;
        let status = r.status();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{action}: {v}");
        v["result"].clone()
    };
    assert_eq!(q.counts().await.unwrap().failed, 3);
    act("retry", json!({"job": "1"})).await;
    assert_eq!(q.get_job_state("1").await.unwrap().as_str(), "waiting");
    let r = act("retry-failed", json!({})).await;
    assert_eq!(r["retried"], 2);
    assert_eq!(q.counts().await.unwrap().waiting, 3);
    act("pause", json!({})).await;
    assert!(q.is_paused().await.unwrap());
    act("resume", json!({})).await;
    let added = act(
        "add",
        json!({"name": "later", "data": {"k": 1}, "delay_ms": 600000}),
    )
    .await;
    let later = added["id"].as_str().unwrap().to_owned();
    assert_eq!(q.get_job_state(&later).await.unwrap().as_str(), "delayed");
    act("promote", json!({"job": later})).await;
    assert_eq!(q.get_job_state(&later).await.unwrap().as_str(), "waiting");
    act("remove", json!({"job": later})).await;
    assert!(q.get_job(&later).await.unwrap().is_none());
    act("drain", json!({})).await;
    assert_eq!(q.counts().await.unwrap().waiting, 0);
    // Node completes two jobs; clean deletes them.
    bullmq(
        "ops",
        &url,
        "ops",
        json!({"ops": [["add", "ok", {}], ["add", "ok", {}], ["work"]]}),
    );
    assert_eq!(q.counts().await.unwrap().completed, 2);
    let r = act("clean", json!({"state": "completed", "grace_ms": 0})).await;
    assert_eq!(r["cleaned"], 2);
    // Bad input is a 400 with nothing done.
    let bad = h
        .api_action("ops", "add", json!({"name": "x", "data": "{"}), &s.api())
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let unknown = h.api_action("ops", "obliterate", json!({}), &s.api()).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let missing = h
        .api_action("ops", "retry", json!({"job": "999"}), &s.api())
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

/// The live feed streams the queue's events as they happen, and the
/// sampler turns completions into throughput.
#[tokio::test(flavor = "multi_thread")]
async fn live_feed_and_throughput() {
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "live").await.unwrap();
    let mut feed = h.get("/events?queue=live").await;
    assert_eq!(feed.status(), StatusCode::OK);
    assert!(feed.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut seen = String::new();
    while !seen.contains("event: ready") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), feed.chunk())
            .await
            .expect("the feed says it is ready")
            .unwrap()
            .expect("the feed stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let id = q.add("hello", &json!({}), JobOptions::new()).await.unwrap();
    let want = format!(r#""event":"added","job_id":"{id}""#);
    while !seen.contains(&want) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), feed.chunk())
            .await
            .expect("the added event arrives")
            .unwrap()
            .expect("the feed stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // The sampler watches the queue; completions show as throughput.
    eventually("samples appear", async || {
        let all = h.json("/api/queues").await;
        (!queue_of(&all, "live")?["samples"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let url = h.redis.url();
    tokio::task::spawn_blocking(move || bullmq("ops", &url, "live", json!({"ops": [["work"]]})))
        .await
        .unwrap();
    eventually("throughput shows", async || {
        let all = h.json("/api/queues").await;
        queue_of(&all, "live")?["samples"]
            .as_array()?
            .iter()
            .any(|s| s["completed_per_s"].as_f64().unwrap_or(0.0) > 0.0)
            .then_some(())
    })
    .await;
}

/// A job page links its parent and its children (across queues).
#[tokio::test(flavor = "multi_thread")]
async fn job_page_links_parent_and_children() {
    let h = start(fast()).await;
    let parents = Queue::new(&h.conn, "parents").await.unwrap();
    let kids = Queue::new(&h.conn, "kids").await.unwrap();
    let parent = parents
        .add("parent", &json!({}), JobOptions::new().job_id("p1"))
        .await
        .unwrap();
    let child = kids
        .add(
            "child",
            &json!({}),
            JobOptions::new().parent(echomq::protocol::ParentRef {
                id: parent.clone(),
                queue: "emq:parents".into(),
            }),
        )
        .await
        .unwrap();
    let p = h.json("/api/queues/parents/jobs/p1").await;
    assert_eq!(p["children"][0]["queue"], "kids");
    assert_eq!(p["children"][0]["id"], child.as_str());
    assert_eq!(p["children"][0]["group"], "pending");
    let c = h.json(&format!("/api/queues/kids/jobs/{child}")).await;
    assert_eq!(c["parent"]["queue"], "parents");
    assert_eq!(c["parent"]["id"], "p1");
    let page = h.html("/queues/parents/jobs/p1").await;
    assert!(page.contains(&format!(r#"href="/queues/kids/jobs/{child}""#)));
    let page = h.html(&format!("/queues/kids/jobs/{child}")).await;
    assert!(page.contains(r#"href="/queues/parents/jobs/p1""#));
}

/// A processor that runs until its job is cancelled, then reports it.
fn until_cancelled(
    seen: tokio::sync::mpsc::UnboundedSender<String>,
) -> std::sync::Arc<dyn echomq::Processor> {
    echomq::processor_fn(move |job: echomq::JobContext| {
        let seen = seen.clone();
        async move {
            tokio::select! {
                _ = job.cancelled() => { let _ = seen.send(job.id().to_owned()); }
                _ = tokio::time::sleep(std::time::Duration::from_secs(120)) => {}
            }
            Ok::<_, echomq::ProcessError>(json!("not stored"))
        }
    })
}

/// The job page offers "Cancel job" while a job is not finished; the confirm
/// form (CSRF token, reason, retry box) cancels a running job on its worker,
/// which sees its processor cancelled, and the job fails with the reason;
/// a waiting job is removed; a finished one is a 409 with nothing changed.
#[tokio::test(flavor = "multi_thread")]
async fn cancel_from_the_dashboard_stops_a_running_job() {
    use echomq::{JobState, WorkerArgs, WorkerSetSpec};
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "cx").await.unwrap();
    let waiting = q
        .add(
            "later",
            &json!({}),
            JobOptions::new().delay(std::time::Duration::from_secs(600)),
        )
        .await
        .unwrap();
    let running = q.add("long", &json!({}), JobOptions::new()).await.unwrap();
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = WorkerSetSpec::new(WorkerArgs::new(q.clone(), until_cancelled(tx)))
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    eventually("the job is running", async || {
        (q.get_job_state(&running).await.unwrap() == JobState::Active).then_some(())
    })
    .await;
    let s = h.session().await;
    let page = h.html(&format!("/queues/cx/jobs/{running}")).await;
    assert!(
        page.contains("action-cancel"),
        "no cancel button on a running job's page"
    );
    let confirm = {
        let r = h
            .http
            .get(h.url(&format!("/queues/cx/confirm/cancel?job={running}")))
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    };
    assert!(confirm.contains(r#"name="reason""#) && confirm.contains(r#"name="retry""#));
    let csrf = csrf_in(&confirm);
    // Without the token nothing happens.
    let bare = h
        .form_action(
            "cx",
            "cancel",
            &[("job", &running)],
            &[("cookie", s.cookie.clone())],
        )
        .await;
    assert_eq!(bare.status(), StatusCode::FORBIDDEN);
    assert_eq!(q.get_job_state(&running).await.unwrap(), JobState::Active);
    let ok = h
        .form_action(
            "cx",
            "cancel",
            &[
                ("csrf", &csrf),
                ("job", &running),
                ("reason", "operator <said> so"),
            ],
            &[("cookie", s.cookie.clone())],
        )
        .await;
    assert!(
        ok.status().is_redirection() || ok.status().is_success(),
        "{}",
        ok.status()
    );
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(30), seen.recv())
        .await
        .expect("the worker's processor was not cancelled")
        .unwrap();
    assert_eq!(stopped, running);
    assert_eq!(q.get_job_state(&running).await.unwrap(), JobState::Failed);
    let job = q.get_job(&running).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some("operator <said> so"));
    // The finished job's page offers no cancel, and the API refuses it.
    let page = h.html(&format!("/queues/cx/jobs/{running}")).await;
    assert!(!page.contains("action-cancel"));
    let again = h
        .api_action("cx", "cancel", json!({"job": running}), &s.api())
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    // A job not started yet is removed.
    let r = h
        .api_action("cx", "cancel", json!({"job": waiting}), &s.api())
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(q.get_job(&waiting).await.unwrap().is_none());
    let missing = h
        .api_action("cx", "cancel", json!({"job": "404"}), &s.api())
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    set.close(std::time::Duration::from_secs(5)).await.unwrap();
    host.stop(None);
}
