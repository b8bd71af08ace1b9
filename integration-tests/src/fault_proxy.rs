//! A fault-injecting TCP proxy between clients and a `redis-server`, for
//! network faults without root or iptables: added latency, a bandwidth
//! limit, a blackhole (sockets stay open, bytes vanish, no RST: a half-open
//! network), a reset of every connection (RST), and a slow close (forwarding
//! stops, the FIN comes only after a delay). The mode switches at runtime and
//! applies to connections already open.
//!
//! ```no_run
//! # async fn t() {
//! use echomq_integration_tests::fault_proxy::{FaultMode, FaultProxy};
//! let redis = echomq_integration_tests::RedisServer::start();
//! let proxy = FaultProxy::start(redis.port()).await;
//! // connect clients to proxy.url() …
//! proxy.set_mode(FaultMode::Blackhole);
//! proxy.set_mode(FaultMode::Pass);
//! proxy.reset_all();
//! # }
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the bytes it forwards.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultMode {
    /// Forwards at once.
    Pass,
    /// Holds every chunk for `base` ± `jitter` (uniform) before forwarding;
    /// order within a direction is kept.
    Latency {
        /// The mean added delay.
        base: Duration,
        /// The largest deviation from `base`.
        jitter: Duration,
    },
    /// Forwards at most `bytes_per_sec` per direction and connection.
    Bandwidth {
        /// The rate.
        bytes_per_sec: u64,
    },
    /// Every connection open while this mode is on (or opened during it)
    /// is dead for good: bytes vanish, the sockets stay open, nobody gets a
    /// FIN or RST, and nothing is forwarded on it again even after the mode
    /// changes, as when a NAT or conntrack entry is lost or the peer host
    /// froze. Connections made after the blackhole work. (Bytes never
    /// vanish from a TCP stream that lives on, so resuming an old
    /// connection after dropping bytes would be no real network.)
    Blackhole,
}

#[derive(Clone, Debug)]
struct Control {
    mode: FaultMode,
    /// Connections opened before this epoch are reset (RST).
    reset_epoch: u64,
    /// Connections opened before this epoch stop forwarding and are closed
    /// with a FIN after the delay.
    close: (u64, Duration),
    /// A request carrying these bytes reaches Redis but its connection is
    /// reset before the reply comes back, while the budget lasts.
    lose_reply: Option<ReplyLoss>,
}

/// The needle, what is left of its budget, and the proxy's count of
/// replies lost.
#[derive(Clone, Debug)]
struct ReplyLoss {
    needle: Arc<[u8]>,
    left: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
}

/// How a connection ends, other than by its two sides closing.
enum Fate {
    /// Reset (RST) both ways.
    Reset,
    /// No more forwarding; FINs after the delay.
    CloseAfter(Duration),
    /// The client's side is reset; the request already on its way is run
    /// by Redis, whose reply is read here and dropped.
    LoseReply,
}

/// A running proxy; it stops accepting and drops its connections when
/// dropped.
pub struct FaultProxy {
    port: u16,
    control: watch::Sender<Control>,
    epoch: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
    /// Replies lost by `lose_replies_to`.
    replies_lost: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (control, _) = watch::channel(Control {
            mode: FaultMode::Pass,
            reset_epoch: 0,
            close: (0, Duration::ZERO),
            lose_reply: None,
        });
        let epoch = Arc::new(AtomicU64::new(1));
        let accepted = Arc::new(AtomicU64::new(0));
        let task = {
            let control = control.clone();
            let epoch = epoch.clone();
            let accepted = accepted.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    let born = epoch.load(Ordering::SeqCst);
                    let rx = control.subscribe();
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                            connection(client, server, rx, born).await;
                        }
                    });
                }
            })
        };
        FaultProxy {
            port,
            control,
            epoch,
            accepted,
            replies_lost: Arc::default(),
            task,
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Connections accepted so far (a reconnect shows up here).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Switches the mode of every connection, open or future.
    pub fn set_mode(&self, mode: FaultMode) {
        self.control.send_modify(|c| c.mode = mode);
    }

    /// Resets (RST) every connection open now; later ones are untouched.
    pub fn reset_all(&self) {
        let e = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.control.send_modify(|c| c.reset_epoch = e);
    }

    /// Every connection open now stops forwarding at once and is closed
    /// with a FIN only after `delay`.
    pub fn close_all_slowly(&self, delay: Duration) {
        let e = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.control.send_modify(|c| c.close = (e, delay));
    }

    /// The next `times` requests that carry `needle` (a script's SHA1, say)
    /// reach Redis, which runs them, but the client's connection is reset
    /// before their replies arrive: a reply lost in flight, deterministically.
    /// [`FaultProxy::replies_lost`] counts them.
    pub fn lose_replies_to(&self, needle: &[u8], times: u64) {
        let lose = ReplyLoss {
            needle: Arc::from(needle),
            left: Arc::new(AtomicU64::new(times)),
            lost: self.replies_lost.clone(),
        };
        self.control.send_modify(|c| c.lose_reply = Some(lose));
    }

    /// Replies lost by [`FaultProxy::lose_replies_to`] so far.
    pub fn replies_lost(&self) -> u64 {
        self.replies_lost.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.reset_all();
    }
}

async fn connection(
    client: TcpStream,
    server: TcpStream,
    mut rx: watch::Receiver<Control>,
    born: u64,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Zero linger: closing a socket sends RST, which is what a reset is.
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let dead = AtomicBool::new(false);
    let doomed = tokio::sync::Notify::new();
    let fate = {
        let mut rx = rx.clone();
        let dead = &dead;
        let doomed = &doomed;
        async move {
            loop {
                {
                    let c = rx.borrow_and_update();
                    if c.mode == FaultMode::Blackhole {
                        dead.store(true, Ordering::SeqCst);
                    }
                    if c.reset_epoch > born {
                        return Fate::Reset;
                    }
                    if c.close.0 > born {
                        return Fate::CloseAfter(c.close.1);
                    }
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() {
                        return Fate::Reset;
                    },
                    _ = doomed.notified() => return Fate::LoseReply,
                }
            }
        }
    };
    let verdict = tokio::select! {
        _ = async { tokio::join!(pump(&mut cr, &mut sw, &rx, &dead, Some(&doomed)), pump(&mut sr, &mut cw, &rx, &dead, None)) } => {
            // Both sides closed: pass the FINs on.
            let _ = sw.shutdown().await;
            let _ = cw.shutdown().await;
            return;
        }
        verdict = fate => verdict,
    };
    rx.mark_unchanged();
    match verdict {
        Fate::Reset => {
            // No FIN on the way out: the zero linger turns the close into RST.
            sw.forget();
            cw.forget();
        }
        Fate::LoseReply => {
            cw.forget();
            drop(cr);
            // Redis runs what it was sent; its replies are read until it has
            // been quiet a while, then dropped with the connection.
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(200), sr.read(&mut buf)).await
            {
                if n == 0 {
                    break;
                }
            }
            sw.forget();
        }
        Fate::CloseAfter(delay) => {
            // Nothing is forwarded any more; the FIN comes after the delay.
            tokio::time::sleep(delay).await;
            let _ = sw.shutdown().await;
            let _ = cw.shutdown().await;
        }
    }
}

/// Copies one direction until EOF or an error, applying the mode to each
/// chunk.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    rx: &watch::Receiver<Control>,
    dead: &AtomicBool,
    doomed: Option<&tokio::sync::Notify>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                // Half-close on: the other side sees this side's FIN.
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        let mode = rx.borrow().mode.clone();
        if mode == FaultMode::Blackhole {
            dead.store(true, Ordering::SeqCst);
        }
        if dead.load(Ordering::SeqCst) {
            continue;
        }
        match mode {
            FaultMode::Pass | FaultMode::Blackhole => {}
            FaultMode::Latency { base, jitter } => {
                let j = jitter.as_micros() as i64;
                let off = if j > 0 {
                    rand::thread_rng().gen_range(-j..=j)
                } else {
                    0
                };
                let d = (base.as_micros() as i64 + off).max(0) as u64;
                tokio::time::sleep(Duration::from_micros(d)).await;
            }
            FaultMode::Bandwidth { bytes_per_sec } => {
                let secs = n as f64 / bytes_per_sec.max(1) as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        // Requests only (`doomed` is the client-to-Redis direction): one
        // carrying the needle dooms the connection once it is on its way.
        if let (Some(doomed), Some(lose)) = (doomed, rx.borrow().lose_reply.clone()) {
            let hit = buf[..n]
                .windows(lose.needle.len())
                .any(|w| w == &lose.needle[..]);
            if hit
                && lose
                    .left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                    .is_ok()
            {
                lose.lost.fetch_add(1, Ordering::SeqCst);
                dead.store(true, Ordering::SeqCst);
                doomed.notify_one();
                return;
            }
        }
    }
}
