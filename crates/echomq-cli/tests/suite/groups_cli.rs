//! Groups from the command line (issue 31, docs/groups.md), the binary run
//! against a real Redis: `add --group`, `add-bulk` lines with
//! `"opts": {"group": {…}}`, `groups <queue>` listing and its changes
//! (`set-concurrency`, `set-rate-limit`, `pause`, `resume`), and `work`
//! with the worker's group option (`--group-concurrency`,
//! `--group-rate-limit`). Bad values are refused with nothing written.

use echomq::groups::GroupDefaults;
use echomq::Queue;
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Value as Json};

use crate::cli::{ok, refused};

/// The `groups` list's row of `id`, split on whitespace.
fn row(list: &str, id: &str) -> Vec<String> {
    list.lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("no row for {id} in\n{list}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_from_the_command_line() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;

    // Refusals first: nothing may be written by any of them.
    refused(&url, &["add", "q", "n", "{}", "--group", "a:b"], "':'");
    refused(
        &url,
        &["add", "q", "n", "{}", "--group-priority", "1"],
        "--group",
    );
    refused(&url, &["groups", "q", "set-concurrency", "t", "0"], "0");
    refused(
        &url,
        &["groups", "q", "set-rate-limit", "t", "0/1000"],
        "at least 1",
    );
    refused(
        &url,
        &["groups", "q", "set-rate-limit", "t", "5"],
        "MAX/DURATION_MS",
    );
    refused(
        &url,
        &["work", "q", "--group-concurrency", "0"],
        "--group-concurrency",
    );
    refused(
        &url,
        &["work", "q", "--group-rate-limit", "5/0"],
        "--group-rate-limit",
    );
    let keys = echomq_integration_tests::keys(&c, "*").await;
    assert!(keys.is_empty(), "a refusal wrote {keys:?}");

    // `add --group` and `add-bulk` lines with the public option.
    let id = ok(&url, &["add", "q", "n", r#"{"i":0}"#, "--group", "acme"]);
    let id = id.trim().to_owned();
    ok(
        &url,
        &[
            "add",
            "q",
            "n",
            r#"{"i":1}"#,
            "--group",
            "acme",
            "--group-priority",
            "3",
        ],
    );
    // Delayed: counted apart until it is due.
    ok(
        &url,
        &[
            "add",
            "q",
            "d",
            r#"{"i":2}"#,
            "--group",
            "acme",
            "--delay",
            "600000",
        ],
    );
    let lines: Vec<String> = (0..4)
        .map(|i| {
            let gid = if i % 2 == 0 { "acme" } else { "globex" };
            json!({"name": "b", "data": {"i": i}, "opts": {"group": {"id": gid}}}).to_string()
        })
        .collect();
    let file = std::env::temp_dir().join(format!("echomq-groups-cli-{}.jsonl", std::process::id()));
    std::fs::write(&file, lines.join("\n")).unwrap();
    ok(&url, &["add-bulk", "q", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    let wait: u64 = c.llen("emq:q:wait").await.unwrap();
    assert_eq!(wait, 0, "group jobs wait in their groups, not in wait");
    let opts: String = c.hget(format!("emq:q:{id}"), "opts").await.unwrap();
    let opts: Json = serde_json::from_str(&opts).unwrap();
    assert_eq!(opts["group"], json!({"id": "acme"}));

    // The list: busiest first, with the counts.
    let list = ok(&url, &["groups", "q"]);
    assert_eq!(&row(&list, "acme")[1..4], ["4", "0", "1"], "{list}");
    assert_eq!(&row(&list, "globex")[1..4], ["2", "0", "0"], "{list}");
    let acme_at = list.find("acme").unwrap();
    assert!(
        acme_at < list.find("globex").unwrap(),
        "busiest first:\n{list}"
    );
    assert!(list.contains("2 of 2 groups"), "{list}");

    // Settings, read back by the Queue API and by the list.
    ok(&url, &["groups", "q", "set-concurrency", "acme", "2"]);
    ok(&url, &["groups", "q", "set-rate-limit", "globex", "5/1000"]);
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "q").await.unwrap();
    let acme = q.groups().counts("acme").await.unwrap();
    assert_eq!(acme.concurrency, Some(2));
    let globex = q.groups().counts("globex").await.unwrap();
    assert_eq!(globex.rate_limit, Some((5, 1000)));
    let list = ok(&url, &["groups", "q"]);
    assert_eq!(row(&list, "acme")[4], "2", "{list}");
    assert!(
        row(&list, "globex").join(" ").contains("5/1000 ms"),
        "{list}"
    );

    // Pause and resume say whether something changed.
    assert!(ok(&url, &["groups", "q", "pause", "globex"]).contains("paused"));
    assert!(ok(&url, &["groups", "q", "pause", "globex"]).contains("already"));
    assert!(q.groups().counts("globex").await.unwrap().paused);
    assert!(row(&ok(&url, &["groups", "q"]), "globex").contains(&"paused".to_owned()));
    // A paused group's jobs are not released: `work` runs acme's only.
    ok(
        &url,
        &[
            "work",
            "q",
            "--quiet",
            "--max-jobs",
            "4",
            "--group-concurrency",
            "3",
            "--group-rate-limit",
            "50/1000",
        ],
    );
    let defaults = q.groups().defaults().await.unwrap();
    assert_eq!(
        defaults,
        GroupDefaults {
            concurrency: Some(3),
            limit: Some((50, 1000)),
        },
        "work's group flags are the queue's group defaults"
    );
    assert!(ok(&url, &["groups", "q"])
        .contains("defaults (groups without their own): conc 3, rate 50/1000 ms"));
    assert_eq!(q.groups().counts("acme").await.unwrap().waiting, 0);
    assert_eq!(q.groups().counts("globex").await.unwrap().waiting, 2);
    assert!(ok(&url, &["groups", "q", "resume", "globex"]).contains("resumed"));
    assert!(ok(&url, &["groups", "q", "resume", "globex"]).contains("was not paused"));
    ok(&url, &["work", "q", "--quiet", "--max-jobs", "2"]);
    assert_eq!(q.counts().await.unwrap().completed, 6);
    let globex = q.groups().counts("globex").await.unwrap();
    assert_eq!((globex.waiting, globex.paused), (0, false));
}
