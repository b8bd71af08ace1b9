//! `echomq relay` as the binary: bad arguments refused before connecting;
//! `subscribe` prints one `{"topic","data"}` line per message (a retained one
//! first) and exits after `--count`; `publish` reaches it, with `--retain`
//! for a later subscriber, as does BullMQ 6.7.0's `Relay`; `show` lists the
//! node, its subscription and the retained message.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use echomq_integration_tests::RedisServer;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

fn echomq(args: &[&str]) -> Output {
    crate::cli::command().args(args).output().unwrap()
}

/// A running `echomq relay subscribe`, once it said it is subscribed.
struct Subscriber {
    child: Child,
}

impl Subscriber {
    fn start(url: &str, args: &[&str]) -> Subscriber {
        let mut child = crate::cli::command()
            .args(["--url", url, "relay", "subscribe"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        loop {
            let line = rx
                .recv_timeout(LIMIT)
                .expect("`relay subscribe` says it is subscribed");
            if line.contains("subscribed to") {
                break;
            }
        }
        Subscriber { child }
    }

    /// Waits for the exit (after `--count` messages); the lines printed.
    fn lines(self) -> Vec<Value> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(self.child.wait_with_output());
        });
        let out = rx
            .recv_timeout(LIMIT)
            .expect("`relay subscribe --count` exits")
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

#[test]
fn bad_arguments_are_refused_before_connecting() {
    let nowhere = "redis://127.0.0.1:1";
    for args in [
        vec!["--url", nowhere, "relay", "publish", "a.*", "1"],
        vec!["--url", nowhere, "relay", "publish", "a.b", "{not json"],
        vec!["--url", nowhere, "relay", "subscribe", "a.>.b"],
        vec!["--url", nowhere, "relay", "--namespace", "no way", "show"],
    ] {
        let out = echomq(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("error:"));
    }
}

#[test]
fn publish_subscribe_retain_and_show() {
    let redis = RedisServer::start();
    let url = redis.url();
    let sub = Subscriber::start(&url, &["orders.>", "--count", "3", "--namespace", "shop"]);
    let out = echomq(&[
        "--url",
        &url,
        "relay",
        "--namespace",
        "shop",
        "publish",
        "orders.1",
        r#"{"a":1}"#,
    ]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 node(s), 1 subscription(s)"), "{said}");
    let out = echomq(&[
        "--url",
        &url,
        "relay",
        "--namespace",
        "shop",
        "publish",
        "orders.2",
        r#""kept""#,
        "--retain",
        "60000",
    ]);
    assert!(out.status.success(), "{out:?}");

    // BullMQ's own Relay reaches the same subscriber.
    let interop =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/interop");
    let node = Command::new("node")
        .current_dir(&interop)
        .args([
            "relay.js",
            "publish",
            &url,
            "shop",
            &json!({"topic": "orders.3.paid", "data": [1, 2]}).to_string(),
        ])
        .output()
        .expect("node is installed");
    assert!(node.status.success(), "{node:?}");
    assert_eq!(
        sub.lines(),
        [
            json!({"topic": "orders.1", "data": {"a": 1}}),
            json!({"topic": "orders.2", "data": "kept"}),
            json!({"topic": "orders.3.paid", "data": [1, 2]}),
        ]
    );

    // A later subscriber of the exact topic gets the retained message first.
    let late = Subscriber::start(&url, &["orders.2", "--count", "1", "--namespace", "shop"]);
    assert_eq!(late.lines(), [json!({"topic": "orders.2", "data": "kept"})]);

    // `show` while a subscriber runs; nodes that left are gone.
    let running = Subscriber::start(&url, &["audit.*", "--count", "1", "--namespace", "shop"]);
    let shown = echomq(&["--url", &url, "relay", "--namespace", "shop", "show"]);
    assert!(shown.status.success(), "{shown:?}");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("1 node(s), 1 subscription(s) on 1 pattern(s), 1 retained"),
        "{text}"
    );
    assert!(text.contains("audit.*"), "{text}");
    assert!(text.contains("\"echomq relay subscribe\""), "{text}");
    assert!(
        text.contains("orders.2") && text.contains("\"kept\""),
        "{text}"
    );
    let out = echomq(&[
        "--url",
        &url,
        "relay",
        "--namespace",
        "shop",
        "publish",
        "audit.x",
        "null",
    ]);
    assert!(out.status.success());
    assert_eq!(running.lines(), [json!({"topic": "audit.x", "data": null})]);
    let empty = echomq(&["--url", &url, "relay", "show"]);
    assert!(String::from_utf8_lossy(&empty.stdout).contains("relay namespace default: 0 node(s)"));
}
