//! F37 and F40: the events stream trimmed under a lagging consumer, and
//! network faults through the fault-injecting proxy.

use std::time::{Duration, Instant};

use echomq::{
    Connection, ConnectionConfig, Delivery, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg,
    StartFrom,
};
use fred::prelude::*;
use ractor::Actor;

use super::fleet::{InProc, SetOptions};
use super::server::Persistence;
use super::{expect, sleep_job, Bed, Ctx, Row};
use crate::fault_proxy::{FaultMode, FaultProxy};

/// F37: a consumer resumes from a saved cursor after the queue's own
/// trimming (maxLenEvents 100) dropped ~1000 events past it: it must be
/// told of the gap.
pub async fn f37(_ctx: Ctx) -> Row {
    let bed = Bed::new("F37", Persistence::None, &[]).await;
    let k = bed.queue.keys();
    let _: () = bed
        .client
        .hset(k.meta(), ("opts.maxLenEvents", "100"))
        .await
        .unwrap_or(());
    let w = InProc::start(&bed.queue, SetOptions::default()).await;
    bed.add("first", sleep_job(0), echomq::JobOptions::new())
        .await;
    bed.drained(Duration::from_secs(20)).await;
    let last: Value = bed
        .client
        .xrevrange(k.events(), "+", "-", Some(1))
        .await
        .unwrap_or(Value::Null);
    let cursor = match last {
        Value::Array(mut e) if !e.is_empty() => match e.remove(0) {
            Value::Array(mut parts) if !parts.is_empty() => parts.remove(0).as_string(),
            _ => None,
        },
        _ => None,
    }
    .unwrap_or_else(|| "0-0".into());
    bed.add_n(300, |_| sleep_job(0)).await;
    let drained = bed.drained(Duration::from_secs(60)).await;
    w.close().await;
    let mut args = QueueEventsArgs::new(bed.conn.clone(), bed.name());
    args.start = StartFrom::After(cursor.clone());
    args.block = Duration::from_millis(200);
    let mut f = Vec::new();
    let mut got = None;
    // Subscribed before the actor starts: its first read is the gap, and a
    // subscriber that arrives after that read would never see it.
    let mut sub = args.subscribers.subscribe(1000);
    if let Ok((qe, _h)) = Actor::spawn(None, QueueEvents, args).await {
        got = tokio::time::timeout(Duration::from_secs(30), sub.recv())
            .await
            .ok()
            .flatten();
        let _ = qe.cast(QueueEventsMsg::Close);
    }
    let gap = matches!(&got, Some(Delivery::Gap { after, .. }) if *after == cursor);
    expect(&mut f, drained.is_some(), "not drained");
    expect(
        &mut f,
        gap,
        format!("first delivery after the trimmed cursor: {got:?}"),
    );
    let xlen: u64 = bed.client.xlen(k.events()).await.unwrap_or(0);
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(
        "consumer resumes from a cursor the stream (maxLenEvents 100) trimmed away",
        &acc,
        None,
        f,
        Some(format!(
            "Gap reported; stream kept {xlen} entries; job states unaffected (event checks saw the tail only)"
        )),
    )
}

/// A connection through the proxy with the default command timeout.
async fn via(proxy: &FaultProxy) -> Connection {
    Connection::connect(ConnectionConfig::with_url(proxy.url()))
        .await
        .expect("connect through the proxy")
}

/// Two worker sets whose every connection goes through the proxy.
async fn proxied_fleet(bed: &Bed, proxy: &FaultProxy) -> (Connection, Vec<InProc>) {
    let conn = via(proxy).await;
    let queue = Queue::new(&conn, &bed.name())
        .await
        .expect("queue via proxy");
    let o = SetOptions {
        concurrency: 4,
        lock: Duration::from_secs(3),
        stalled_interval: Duration::from_millis(500),
        ..Default::default()
    };
    let a = InProc::start(&queue, o.clone()).await;
    let b = InProc::start(&queue, o).await;
    (conn, vec![a, b])
}

/// F40: latency 200 ± 100 ms for 3 s, then a 10 s blackhole (no RST): the
/// workers must notice, reconnect and drain; late finishes are fenced.
pub async fn f40(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F40", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(3);
    let proxy = FaultProxy::start(bed.redis.port()).await;
    bed.add_n(80, |_| sleep_job(300)).await;
    let (_conn, sets) = proxied_fleet(&bed, &proxy).await;
    bed.wait_active(4, Duration::from_secs(20)).await;
    proxy.set_mode(FaultMode::Latency {
        base: Duration::from_millis(200),
        jitter: Duration::from_millis(100),
    });
    // The faults' lengths: 3 s of latency, then a 10 s blackhole.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = proxy.accepted();
    proxy.set_mode(FaultMode::Blackhole);
    let hole = Instant::now();
    let mut detected = None;
    while hole.elapsed() < Duration::from_secs(10) {
        if detected.is_none() && proxy.accepted() > before {
            detected = Some(hole.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.set_mode(FaultMode::Pass);
    let drained = bed.drained(Duration::from_secs(90)).await;
    for s in sets {
        s.close().await;
    }
    let mut f = Vec::new();
    expect(
        &mut f,
        drained.is_some(),
        "not drained within 90 s after the blackhole: a deaf worker",
    );
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(
        "proxy: latency 200 ± 100 ms for 3 s, then a 10 s blackhole (half-open, no RST)",
        &acc,
        drained,
        f,
        Some(format!(
            "first new connection {}; {} connections accepted in all",
            detected
                .map(|d| format!("{:.1} s into the blackhole", d.as_secs_f64()))
                .unwrap_or_else(|| "only after the blackhole".into()),
            proxy.accepted()
        )),
    )
}

/// F40b: the other proxy faults: a 20 KB/s bandwidth limit, three resets
/// (RST) of every connection, a slow close (FIN after 2 s of silence).
pub async fn f40b(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F40b", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(3);
    let proxy = FaultProxy::start(bed.redis.port()).await;
    bed.add_n(80, |_| sleep_job(200)).await;
    let (_conn, sets) = proxied_fleet(&bed, &proxy).await;
    bed.wait_active(4, Duration::from_secs(20)).await;
    proxy.set_mode(FaultMode::Bandwidth {
        bytes_per_sec: 20_000,
    });
    // The faults' lengths and spacing, as the row names them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.set_mode(FaultMode::Pass);
    for _ in 0..3 {
        proxy.reset_all();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    proxy.close_all_slowly(Duration::from_secs(2));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let drained = bed.drained(Duration::from_secs(90)).await;
    for s in sets {
        s.close().await;
    }
    let mut f = Vec::new();
    expect(&mut f, drained.is_some(), "not drained within 90 s");
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(
        "proxy: 20 KB/s for 3 s, 3 resets (RST) 1 s apart, a slow close (FIN after 2 s)",
        &acc,
        drained,
        f,
        Some(format!(
            "{} connections accepted (reconnects)",
            proxy.accepted()
        )),
    )
}
