//! A job page shows a payload stored through a codec decoded when the
//! dashboard has the key, and says why not when it has not
//! (docs/operations.md §Memory).

use crate::support::*;

use echomq::codec::{Codec, CodecKey, CodecOptions, Keyring};
use echomq::{JobOptions, Queue, QueueOptions};
use serde_json::json;

fn sealing(id: &str, key: [u8; 32]) -> CodecOptions {
    CodecOptions::default()
        .encode(Some(Codec::Aes256GcmGzip))
        .keys(Keyring::default().with_key(id, CodecKey::new(key)).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_page_decodes_with_the_dashboards_keys() {
    let keys = sealing("k1", [7; 32]);
    let h = start(fast().codec(CodecOptions::default().keys(keys.keys.clone()))).await;
    let open = |codec| QueueOptions::default().codec(codec);
    let q = Queue::with_options(&h.conn, "orders", open(keys.clone()))
        .await
        .unwrap();
    // Over GZIP_MIN_BYTES of JSON, so `gzip` wraps it too.
    let data = json!({"order": "ORD-1", "total": "12.50", "note": "n".repeat(300)});
    let known = q.add("o", &data, JobOptions::new()).await.unwrap();
    let other = Queue::with_options(&h.conn, "orders", open(sealing("k9", [9; 32])))
        .await
        .unwrap();
    let unknown = other.add("o", &data, JobOptions::new()).await.unwrap();
    let gz = Queue::with_options(
        &h.conn,
        "orders",
        open(CodecOptions::default().encode(Some(Codec::Gzip))),
    )
    .await
    .unwrap();
    let zipped = gz.add("o", &data, JobOptions::new()).await.unwrap();

    for id in [&known, &zipped] {
        let detail = h.json(&format!("/api/queues/orders/jobs/{id}")).await;
        assert_eq!(detail["decoded"]["data"]["value"], data, "{detail}");
        assert_eq!(detail["data"]["v"], 1, "the stored envelope is shown too");
        let page = h.html(&format!("/queues/orders/jobs/{id}")).await;
        assert!(page.contains("id=\"job-decoded-data\""), "{page}");
        assert!(page.contains("ORD-1"), "decoded on the page");
    }
    let detail = h.json(&format!("/api/queues/orders/jobs/{unknown}")).await;
    assert_eq!(detail["decoded"]["data"]["codec"], "aes256gcm+gzip");
    let why = detail["decoded"]["data"]["error"].as_str().unwrap();
    assert!(why.contains("no key with id \"k9\""), "{why}");
    let page = h.html(&format!("/queues/orders/jobs/{unknown}")).await;
    assert!(page.contains("not decoded here"), "{page}");
    assert!(!page.contains("ORD-1"));
    // A plain job has no decoded section.
    let plain = Queue::new(&h.conn, "orders").await.unwrap();
    let id = plain.add("o", &data, JobOptions::new()).await.unwrap();
    let detail = h.json(&format!("/api/queues/orders/jobs/{id}")).await;
    assert!(detail.get("decoded").is_none(), "{detail}");
}
