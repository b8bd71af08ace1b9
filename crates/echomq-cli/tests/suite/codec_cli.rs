//! `echomq add --codec`, `echomq job` and `echomq work` with payload codecs,
//! as the binary against a real Redis: keys from a file or ECHOMQ_CODEC_KEYS,
//! sealed data shown decoded only with the key, return values encoded, bad
//! settings refused before anything is written, and no key ever printed.

use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::Value;

const KEY_B64: &str = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

fn echomq_env(url: &str, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut c = crate::cli::command();
    c.args(["--url", url]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the echomq binary runs")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn add_job_and_work_with_a_sealing_codec() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("# codec keys\nk1:{KEY_B64}\n")).unwrap();
    let keys = keys.to_str().unwrap();
    let env = [("ECHOMQ_CODEC_KEYS", &*format!("k1:{KEY_B64}"))];
    let mut printed = String::new();
    // Over GZIP_MIN_BYTES, so the worker's echo of it is stored gzip-wrapped.
    let order = format!(r#"{{"order":"ORD-7","note":"{}"}}"#, "n".repeat(300));

    let out = echomq_env(
        &url,
        &[],
        &[
            "add",
            "q",
            "n",
            &order,
            "--codec",
            "aes256gcm+gzip",
            "--codec-keys-file",
            keys,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    printed += &text(&out);
    let raw: String = c.hget("emq:q:1", "data").await.unwrap();
    let env_json: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(env_json["emq:codec"], "aes256gcm+gzip");
    assert_eq!(env_json["kid"], "k1");
    assert!(!raw.contains("ORD-7"));

    // Refused before anything is written.
    for (args, why) in [
        (
            vec!["add", "q", "n", "{}", "--codec", "aes256gcm+gzip"],
            "needs a key",
        ),
        (
            vec!["add", "q", "n", "{}", "--codec", "zstd"],
            "unknown payload codec",
        ),
    ] {
        let out = echomq_env(&url, &[], &args);
        assert!(!out.status.success(), "{args:?}");
        assert!(text(&out).contains(why), "{args:?}: {}", text(&out));
    }
    let bad_keys = echomq_env(
        &url,
        &[("ECHOMQ_CODEC_KEYS", "k1:short")],
        &["add", "q", "n", "{}"],
    );
    assert!(!bad_keys.status.success());
    assert!(
        text(&bad_keys).contains("invalid codec key"),
        "{}",
        text(&bad_keys)
    );
    let next: Option<String> = c.get("emq:q:id").await.unwrap();
    assert_eq!(next.as_deref(), Some("1"), "nothing more was added");

    // `echomq job` decodes with the key and says why not without it.
    let without = echomq_env(&url, &[], &["job", "q", "1"]);
    assert!(without.status.success());
    assert!(
        text(&without).contains("not decoded: no key with id \"k1\""),
        "{}",
        text(&without)
    );
    assert!(!text(&without).contains("ORD-7"));
    let with = echomq_env(&url, &env, &["job", "q", "1"]);
    assert!(
        text(&with).contains("data (aes256gcm+gzip, decoded)"),
        "{}",
        text(&with)
    );
    assert!(text(&with).contains(r#"{"order":"ORD-7","#));
    printed += &(text(&without) + &text(&with));

    // The worker reads the sealed data and stores its echo gzip-encoded.
    let out = echomq_env(
        &url,
        &env,
        &[
            "work",
            "q",
            "--quiet",
            "--processor",
            "echo",
            "--max-jobs",
            "1",
            "--codec",
            "gzip",
            "--log-level",
            "debug",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    printed += &text(&out);
    let rv: String = c.hget("emq:q:1", "returnvalue").await.unwrap();
    let rv: Value = serde_json::from_str(&rv).unwrap();
    assert_eq!(rv["emq:codec"], "gzip", "{rv}");
    let shown = echomq_env(&url, &env, &["job", "q", "1"]);
    assert!(
        text(&shown).contains("returnvalue (gzip, decoded)"),
        "{}",
        text(&shown)
    );
    printed += &text(&shown);
    assert!(!printed.contains(KEY_B64), "a key was printed: {printed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn add_bulk_with_gzip_stores_long_data_in_envelopes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobs.jsonl");
    // Short data stays plain under gzip (GZIP_MIN_BYTES); the long line is wrapped.
    let long = format!(r#"{{"name":"c","data":{{"pad":"{}"}}}}"#, "p".repeat(300));
    let lines = format!(
        "{}\n{}\n{long}\n",
        r#"{"name":"a","data":{"n":1}}"#, r#"{"name":"b","data":{"n":2}}"#
    );
    std::fs::write(&file, lines).unwrap();
    let out = echomq_env(
        &url,
        &[],
        &["add-bulk", "bq", file.to_str().unwrap(), "--codec", "gzip"],
    );
    assert!(out.status.success(), "{}", text(&out));
    for (id, codec) in [("1", None), ("2", None), ("3", Some("gzip"))] {
        let raw: String = c.hget(format!("emq:bq:{id}"), "data").await.unwrap();
        let v: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v["emq:codec"].as_str(), codec, "{raw}");
    }
    let shown = echomq_env(&url, &[], &["job", "bq", "2"]);
    assert!(text(&shown).contains(r#"{"n":2}"#), "{}", text(&shown));
    let shown = echomq_env(&url, &[], &["job", "bq", "3"]);
    assert!(
        text(&shown).contains("data (gzip, decoded)"),
        "{}",
        text(&shown)
    );
    assert!(text(&shown).contains(&"p".repeat(300)), "{}", text(&shown));
}

#[tokio::test(flavor = "multi_thread")]
async fn add_offloads_job_shows_it_and_blobs_sweeps_what_no_job_uses() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("dir:{}", dir.path().display());
    let big = format!(r#"{{"pad":"{}"}}"#, "z".repeat(3000));
    let out = echomq_env(
        &url,
        &[],
        &[
            "add",
            "oq",
            "n",
            &big,
            "--offload",
            &store,
            "--offload-threshold",
            "1024",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let raw: String = c.hget("emq:oq:1", "data").await.unwrap();
    let reference: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(reference["emq:codec"], "blob", "{raw}");
    // `job` reads the blob with the store named, says where it is without.
    let shown = echomq_env(&url, &[("ECHOMQ_OFFLOAD", &store)], &["job", "oq", "1"]);
    assert!(text(&shown).contains(&"z".repeat(3000)), "{}", text(&shown));
    let shown = echomq_env(&url, &[], &["job", "oq", "1"]);
    assert!(
        text(&shown).contains("blob store and this queue has none configured"),
        "{}",
        text(&shown)
    );
    // Bad settings are refused before anything is written.
    for (args, why) in [
        (vec!["--offload", "ftp://x"], "unknown blob store"),
        (vec!["--offload", "dir:/nonexistent/emq"], "does not exist"),
        (vec!["--offload-threshold", "10"], "needs --offload"),
        (
            vec!["--offload", &store, "--offload-threshold", "0"],
            "at least 1",
        ),
    ] {
        let mut a = vec!["add", "oq", "n", "{}"];
        a.extend(args);
        let out = echomq_env(&url, &[], &a);
        assert!(!out.status.success(), "{a:?}: {}", text(&out));
        assert!(text(&out).contains(why), "{a:?}: {}", text(&out));
    }
    let n: u64 = c.llen("emq:oq:wait").await.unwrap();
    assert_eq!(n, 1, "nothing added by a refused command");
    // Removed, its blob is swept.
    let out = echomq_env(&url, &[], &["remove", "oq", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = echomq_env(
        &url,
        &[],
        &["blobs", "oq", "--offload", &store, "--grace", "0"],
    );
    assert!(
        text(&out).contains("examined 1 blobs, deleted 1"),
        "{}",
        text(&out)
    );
    let left: u64 = c.zcard("emq:oq:blobs").await.unwrap();
    assert_eq!(left, 0);
}
