//! One shared fred pool for everything, dedicated clients for blocking reads,
//! and the frozen scripts loaded into Redis.
//!
//! Scripts are `SCRIPT LOAD`ed when the connection is made (on every primary in
//! cluster mode) and called with `EVALSHA`. A `NOSCRIPT` reply (Redis restart,
//! failover, `SCRIPT FLUSH`) reloads the script and retries once.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::{Reply, ScriptCall, ScriptId};
use fred::prelude::{
    Builder, Client, ClientInterface, ClientLike, Config, LuaInterface, Options, Pool,
    ReconnectPolicy, Value,
};
use tracing::{debug, warn};

use super::config::{redacted_url, ConnectionConfig};
use super::{redirect, tls};
use crate::error::{Error, Result};

/// A cheap-to-clone handle on the shared pool. Every Queue, Worker and actor of
/// one process holds a clone of the same `Connection`.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    fred_config: Config,
    config: ConnectionConfig,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &redacted_url(&self.inner.config.url))
            .field("prefix", &self.inner.config.prefix)
            .field("pool_size", &self.inner.config.pool_size)
            .finish()
    }
}

impl Connection {
    /// Connects the pool and loads every script of the catalogue.
    pub async fn connect(config: ConnectionConfig) -> Result<Self> {
        echomq_protocol::validate::validate_prefix(&config.prefix)?;
        if config.pool_size == 0 {
            return Err(Error::Config("pool_size must be at least 1".into()));
        }
        let mut fred_config = Config::from_url(&config.url)?;
        tls::apply(&mut fred_config, &config.url, &config.tls)?;
        let pool = builder(&fred_config, &config).build_pool(config.pool_size)?;
        if let Err(e) = pool.init().await {
            let _ = pool.quit().await;
            return Err(explain_connect_error(&config, e));
        }
        crate::telemetry::metrics::watch_reconnects(&pool);
        let conn = Connection {
            inner: Arc::new(Inner {
                pool,
                fred_config,
                config,
            }),
        };
        conn.load_scripts().await?;
        Ok(conn)
    }

    /// Connects with the defaults to `url`.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(ConnectionConfig::with_url(url)).await
    }

    /// The key prefix of every queue on this connection.
    pub fn prefix(&self) -> &str {
        &self.inner.config.prefix
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &ConnectionConfig {
        &self.inner.config
    }

    /// The shared pool, for plain commands.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// A new dedicated client for one blocking loop (BZPOPMIN, XREAD BLOCK):
    /// never shared, never replaying a command after a reconnect, optionally
    /// named with `CLIENT SETNAME` (see [`Connection::name_client`]).
    pub async fn dedicated_client(&self, name: Option<&str>) -> Result<Client> {
        // The shared builder already forbids replaying commands after a
        // reconnect, which a blocking read must never be.
        let client = builder(&self.inner.fred_config, &self.inner.config).build()?;
        client.init().await?;
        if let Some(name) = name {
            self.name_client(&client, name).await;
        }
        Ok(client)
    }

    /// A new subscriber client (pub/sub), resubscribing by itself after a
    /// reconnect.
    pub(crate) async fn subscriber(&self) -> Result<fred::clients::SubscriberClient> {
        let client =
            builder(&self.inner.fred_config, &self.inner.config).build_subscriber_client()?;
        client.init().await?;
        client.manage_subscriptions();
        Ok(client)
    }

    /// `CLIENT SETNAME name` on `client`'s connections. A clustered client
    /// has one connection per primary and a keyless command goes to any one
    /// of them, so the name is set on every primary: whichever node serves
    /// the queue's slot (now or after a failover) lists the worker, as
    /// BullMQ's `getWorkers` expects. Servers that refuse CLIENT are
    /// tolerated, as BullMQ does.
    pub async fn name_client(&self, client: &Client, name: &str) {
        use fred::interfaces::ClusterInterface;
        let primaries = if client.is_clustered() {
            client
                .cached_cluster_state()
                .map(|state| state.unique_primary_nodes())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if primaries.is_empty() {
            if let Err(e) = client.client_setname(name).await {
                warn!(error = %e, "CLIENT SETNAME refused");
            }
            return;
        }
        for node in primaries {
            if let Err(e) = client.with_cluster_node(&node).client_setname(name).await {
                warn!(error = %e, node = %node, "CLIENT SETNAME refused");
            }
        }
    }

    /// The primary serving `key`'s slot on a clustered client (`None` on a
    /// single server): where keyless commands about a connection that blocks
    /// on `key` must go (`CLIENT ID`, `CLIENT UNBLOCK`).
    pub fn node_for_key(client: &Client, key: &str) -> Option<fred::types::config::Server> {
        use fred::interfaces::ClusterInterface;
        if !client.is_clustered() {
            return None;
        }
        let slot = fred::util::redis_keyslot(key.as_bytes());
        client.cached_cluster_state()?.get_server(slot).cloned()
    }

    /// `SCRIPT LOAD`s every script of the catalogue, on every primary in a cluster.
    pub async fn load_scripts(&self) -> Result<()> {
        let clustered = self.inner.pool.next().is_clustered();
        for id in ScriptId::ALL {
            let def = id.def().ok_or(Error::MissingScript(id.name()))?;
            if clustered {
                self.inner
                    .pool
                    .next()
                    .script_load_cluster::<(), _>(def.source)
                    .await?;
            } else {
                let sha: String = self.inner.pool.next().script_load(def.source).await?;
                if sha != def.sha1 {
                    return Err(Error::protocol(
                        "SCRIPT LOAD",
                        format!("{}: server hash {sha} differs from {}", id.name(), def.sha1),
                    ));
                }
            }
        }
        debug!(scripts = ScriptId::ALL.len(), "scripts loaded");
        Ok(())
    }

    /// Runs one script call: EVALSHA, pipelined with the other calls on the
    /// same connection; on NOSCRIPT the script is loaded again and the call
    /// retried once (the first attempt did nothing, so this is safe). In a
    /// cluster, a call the cluster refused without running it (MOVED, ASK,
    /// TRYAGAIN, CLUSTERDOWN while a slot moves or fails over) is resent with
    /// a growing pause for up to 20 s.
    #[tracing::instrument(level = "trace", name = "script", skip_all, fields(script = call.script().name()))]
    pub async fn call<C: ScriptCall>(&self, call: &C) -> Result<C::Output> {
        let script = call.script();
        let def = script.def().ok_or(Error::MissingScript(script.name()))?;
        let (route, first) = evalsha(def.sha1, call);
        // The arguments go out without a copy; a resend (rare) encodes the
        // call again rather than every call paying for a clone.
        let mut first = Some(first);
        let client = self.inner.pool.next();
        let mut reloaded = false;
        let mut refused = 0;
        let started = std::time::Instant::now();
        let reply = loop {
            let args = first.take().unwrap_or_else(|| evalsha(def.sha1, call).1);
            // fred's command future is ~6.7 KB. Boxed here, it leaves every
            // future that awaits a call small: a slot's finish awaits it four
            // deep, and each level used to copy it whole once per job.
            let raw = Box::pin(client.custom_raw(route.clone(), args)).await;
            match raw.and_then(frame_to_reply) {
                Err(e) if is_noscript(&e) && !reloaded => {
                    reloaded = true;
                    Box::pin(self.reload(client, script)).await?;
                }
                Err(e)
                    if redirect::refused_by_cluster(&e) && started.elapsed() < redirect::BUDGET =>
                {
                    refused += 1;
                    debug!(script = script.name(), error = %e, refused, "refused by the cluster; resending");
                    tokio::time::sleep(redirect::pause(refused)).await;
                }
                other => {
                    break other
                        .map_err(|e| Error::after_send(e, script.name(), script.writes()))?
                }
            }
        };
        if script.writes() && self.inner.config.durability.is_some() {
            Box::pin(self.wait_for_replicas(client, &[&route])).await?;
        }
        Ok(call.decode(reply)?)
    }

    /// The durability mode's `WAIT`, on the connection (and cluster node) that
    /// ran the calls, once per distinct route. Only after scripts that write
    /// (`ScriptId::writes`): a read has nothing to lose in a failover, and
    /// while a new primary's replicas attach it would fail for nothing.
    async fn wait_for_replicas(
        &self,
        client: &Client,
        routes: &[&fred::types::CustomCommand],
    ) -> Result<()> {
        let Some(d) = self.inner.config.durability else {
            return Ok(());
        };
        let timeout_ms = i64::try_from(d.timeout.as_millis()).unwrap_or(i64::MAX);
        let mut seen: Vec<&fred::types::ClusterHash> = Vec::new();
        for route in routes {
            if seen.contains(&&route.cluster_hash) {
                continue;
            }
            seen.push(&route.cluster_hash);
            let wait = fred::types::CustomCommand::new_static(
                "WAIT",
                route.cluster_hash.clone(),
                // Not marked blocking: its own timeout is far below the
                // command timeout, and the other calls pipelined behind it
                // may wait those few milliseconds.
                false,
            );
            let acked: i64 = client
                .custom(
                    wait,
                    vec![Value::from(d.replicas as i64), Value::from(timeout_ms)],
                )
                .await?;
            if acked < i64::from(d.replicas) {
                if matches!(
                    self.inner.fred_config.server,
                    fred::types::config::ServerConfig::Sentinel { .. }
                ) {
                    // A primary whose replicas left was most likely demoted
                    // by the sentinels; they are asked again now rather than
                    // when it starts refusing writes (up to 10 s later).
                    let stale = client.clone();
                    tokio::spawn(async move {
                        let _ = stale.force_reconnection().await;
                    });
                }
                return Err(Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::IO,
                    format!(
                        "WAIT: {acked} of {} replicas acknowledged the write within {:?}; \
                         it may not survive a failover",
                        d.replicas, d.timeout
                    ),
                )));
            }
        }
        Ok(())
    }

    /// Runs many calls of one type in one pipelined round trip and returns
    /// each one's result in order. Calls refused with NOSCRIPT, or redirected
    /// to another cluster node, did nothing: exactly those are resent (after
    /// the scripts are loaded again, for NOSCRIPT).
    #[tracing::instrument(level = "trace", name = "script_batch", skip_all, fields(calls = calls.len()))]
    pub async fn call_batch<C: ScriptCall>(&self, calls: &[C]) -> Vec<Result<C::Output>> {
        if calls.is_empty() {
            return Vec::new();
        }
        let mut encoded = Vec::with_capacity(calls.len());
        for c in calls {
            match c.script().def() {
                Some(def) => encoded.push(evalsha(def.sha1, c)),
                None => {
                    return calls
                        .iter()
                        .map(|c| Err(Error::MissingScript(c.script().name())))
                        .collect()
                }
            }
        }
        let client = self.inner.pool.next();
        let mut raw = pipeline(client, &encoded).await;
        let mut reloaded = false;
        let started = std::time::Instant::now();
        for round in 1.. {
            let noscript = raw.iter().any(|r| matches!(r, Err(e) if is_noscript(e)));
            if noscript && !reloaded {
                reloaded = true;
                if let Err(e) = self.load_scripts().await {
                    return vec_of_errors(calls.len(), &e);
                }
            }
            let refused = |r: &std::result::Result<Value, fred::error::Error>| matches!(r, Err(e) if redirect::refused_by_cluster(e));
            let within_budget = started.elapsed() < redirect::BUDGET;
            let again: Vec<usize> = (0..raw.len())
                .filter(|&i| match &raw[i] {
                    Err(e) if is_noscript(e) => round == 1,
                    r => within_budget && refused(r),
                })
                .collect();
            if again.is_empty() {
                break;
            }
            if again.iter().any(|&i| refused(&raw[i])) {
                tokio::time::sleep(redirect::pause(round)).await;
            }
            let resend: Vec<_> = again.iter().map(|&i| encoded[i].clone()).collect();
            for (i, r) in again.into_iter().zip(pipeline(client, &resend).await) {
                raw[i] = r;
            }
        }
        let routes: Vec<&fred::types::CustomCommand> = encoded
            .iter()
            .zip(calls)
            .filter(|(_, call)| call.script().writes())
            .map(|((c, _), _)| c)
            .collect();
        if let Err(e) = self.wait_for_replicas(client, &routes).await {
            // Every write of the batch is as uncertain as the WAIT.
            let msg = e.to_string();
            return calls
                .iter()
                .map(|_| {
                    Err(Error::Redis(fred::error::Error::new(
                        fred::error::ErrorKind::IO,
                        msg.clone(),
                    )))
                })
                .collect();
        }
        raw.into_iter()
            .zip(calls)
            .map(|(r, c)| {
                let script = c.script();
                let r = r.map_err(|e| Error::after_send(e, script.name(), script.writes()))?;
                Ok(c.decode(to_reply(r))?)
            })
            .collect()
    }

    async fn reload(&self, client: &Client, script: ScriptId) -> Result<()> {
        let def = script.def().ok_or(Error::MissingScript(script.name()))?;
        warn!(script = script.name(), "NOSCRIPT: reloading");
        if client.is_clustered() {
            client.script_load_cluster::<(), _>(def.source).await?;
        } else {
            client.script_load::<String, _>(def.source).await?;
        }
        Ok(())
    }

    /// Probes the pool once with a PING. A half-open network (packets vanish,
    /// no FIN or RST) leaves the pool's sockets open but dead: fred times each
    /// command out and keeps the socket, so every later command on it times
    /// out too, and renewals, finishes and stalled checks all fail for good (a
    /// deaf worker). A PING that times out rebuilds the pool's connections
    /// (commands are never replayed, so nothing runs twice). The Worker's
    /// watchdog runs it; chaos scenario F40 (docs/reliability.md).
    pub(crate) async fn probe(&self) {
        if let Err(e) = self.inner.pool.ping::<String>(None).await {
            if matches!(e.kind(), fred::error::ErrorKind::Timeout) {
                warn!(error = %e, "the pool does not answer: reconnecting it");
                if let Err(e) = self.inner.pool.force_reconnection().await {
                    warn!(error = %e, "pool reconnection failed; the next watchdog tick retries");
                }
            }
        }
    }

    /// Closes every client of the pool.
    pub async fn close(&self) {
        let _ = self.inner.pool.quit().await;
    }
}

/// EVALSHA goes out as a raw command. fred's typed `evalsha` is never
/// pipelined: it waits for each reply before the next command goes out on that
/// connection, because a NOSCRIPT inside a pipeline cannot be retried in place.
/// Every call here is retried on its own after a NOSCRIPT (it did nothing), so
/// pipelining is safe — and it lets concurrent jobs share a connection and a
/// Redis read, which is most of the Redis CPU per job at high concurrency.
///
/// The command carries the hash slot of the call's first key: fred 10 routes
/// a custom command by its own hasher unless the slot is given explicitly,
/// and its default hashes the first argument — the script's SHA — which
/// sends the call to a random primary in a cluster (answered with MOVED).
fn evalsha_command(keys: &[echomq_protocol::keys::Key]) -> fred::types::CustomCommand {
    let route = match keys.first() {
        Some(k) => fred::types::ClusterHash::Custom(fred::util::redis_keyslot(k.as_bytes())),
        None => fred::types::ClusterHash::Random,
    };
    fred::types::CustomCommand::new_static("EVALSHA", route, false)
}

/// The routed command and `sha numkeys keys… args…`. Every value is a
/// reference-counted buffer handed to fred as is: the SHA and the key count
/// are static text, the queue's fixed keys are shared, and the short values
/// made for this call slice one buffer (docs/benchmarks.md, "Per-job cost,
/// deterministic").
fn evalsha<C: ScriptCall>(sha: &'static str, call: &C) -> (fred::types::CustomCommand, Vec<Value>) {
    let keys = call.keys();
    debug_assert_eq!(
        keys.len(),
        call.script().num_keys(),
        "{} takes {} keys",
        call.script().name(),
        call.script().num_keys()
    );
    let command = evalsha_command(&keys);
    let num = num_keys(keys.len());
    let parts = echomq_protocol::call::call_parts(keys, call.args());
    let mut all: Vec<Value> = Vec::with_capacity(2 + parts.len());
    all.push(Value::Bytes(fred::bytes::Bytes::from_static(
        sha.as_bytes(),
    )));
    all.push(num);
    all.extend(parts.into_iter().map(Value::Bytes));
    (command, all)
}

/// The key count as static decimal text (no script takes more than 20 keys;
/// a larger count is formatted as usual).
fn num_keys(n: usize) -> Value {
    const SMALL: [&str; 21] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
        "17", "18", "19", "20",
    ];
    match SMALL.get(n) {
        Some(s) => Value::Bytes(fred::bytes::Bytes::from_static(s.as_bytes())),
        None => Value::Integer(n as i64),
    }
}

fn vec_of_errors<T>(n: usize, e: &Error) -> Vec<Result<T>> {
    let msg = e.to_string();
    (0..n)
        .map(|_| Err(Error::Config(format!("reloading scripts: {msg}"))))
        .collect()
}

async fn pipeline(
    client: &Client,
    encoded: &[(fred::types::CustomCommand, Vec<Value>)],
) -> Vec<std::result::Result<Value, fred::error::Error>> {
    let pipe = client.pipeline();
    for (command, args) in encoded {
        if let Err(e) = pipe.custom::<(), _>(command.clone(), args.clone()).await {
            return encoded.iter().map(|_| Err(e.clone())).collect();
        }
    }
    let results = pipe.try_all::<Value>().await;
    // A pipeline that failed as a whole (a timeout, a dropped connection)
    // comes back as one error: it is every call's.
    match results.as_slice() {
        [Err(e)] if encoded.len() > 1 => encoded.iter().map(|_| Err(e.clone())).collect(),
        _ => results,
    }
}

/// A reply frame as the protocol's wire reply, read straight from the frame:
/// the same reply [`to_reply`] gives for fred's value of it, without building
/// that value first (a UTF-8 check and a copy of every array per call).
/// Errors, maps and frame kinds a script does not return go through fred's
/// own reading, so the error (or the map's order) is exactly the one
/// `custom` would have returned.
fn frame_to_reply(
    frame: fred::types::Resp3Frame,
) -> std::result::Result<Reply, fred::error::Error> {
    use fred::types::Resp3Frame as F;
    Ok(match frame {
        F::Null => Reply::Nil,
        // fred reads a `QUEUED` status as a queued marker, which is nil here.
        F::SimpleString { data, .. } if &data[..] == b"QUEUED" => Reply::Nil,
        F::SimpleString { data, .. }
        | F::BlobString { data, .. }
        | F::VerbatimString { data, .. }
        | F::BigNumber { data, .. } => Reply::Bulk(data),
        F::Number { data, .. } => Reply::Int(data),
        F::Double { data, .. } => Reply::Double(data),
        F::Boolean { data, .. } => Reply::Int(data as i64),
        F::Array { data, .. } | F::Push { data, .. } => Reply::Array(
            data.into_iter()
                .map(frame_to_reply)
                .collect::<std::result::Result<_, _>>()?,
        ),
        F::Set { data, .. } => Reply::Array(
            data.into_iter()
                .map(frame_to_reply)
                .collect::<std::result::Result<_, _>>()?,
        ),
        other => to_reply(Value::try_from(other)?),
    })
}

/// fred's value as the protocol's wire reply.
pub(crate) fn to_reply(v: Value) -> Reply {
    match v {
        Value::Null | Value::Queued => Reply::Nil,
        Value::Integer(n) => Reply::Int(n),
        Value::Double(d) => Reply::Double(d),
        Value::Boolean(b) => Reply::Int(b as i64),
        Value::String(s) => Reply::Bulk(s.into_inner()),
        Value::Bytes(b) => Reply::Bulk(b),
        Value::Array(a) => Reply::Array(a.into_iter().map(to_reply).collect()),
        Value::Map(m) => Reply::Array(
            m.inner()
                .into_iter()
                .flat_map(|(k, v)| [Reply::Bulk(k.into_bytes()), to_reply(v)])
                .collect(),
        ),
    }
}

pub(crate) fn is_noscript(e: &fred::error::Error) -> bool {
    e.details().starts_with("NOSCRIPT")
}

fn builder(fred_config: &Config, config: &ConnectionConfig) -> Builder {
    let mut b = Builder::from_config(fred_config.clone());
    let delay = u32::try_from(config.reconnect_delay.as_millis()).unwrap_or(u32::MAX);
    b.with_connection_config(|c| {
        c.connection_timeout = config.connect_timeout;
        // Replaying a non-idempotent script (an add with a generated id) after a
        // reconnect could store a job twice; the caller sees the error instead.
        c.max_command_attempts = 1;
        redirect::configure(c);
    })
    .with_performance_config(|p| {
        p.default_command_timeout = config.command_timeout;
    })
    .set_policy(ReconnectPolicy::new_constant(0, delay));
    b
}

/// The first connection failed: say what the usual cause is when TLS is
/// involved, since fred's own message ("connection reset", "invalid peer
/// certificate") does not say which side is misconfigured.
fn explain_connect_error(config: &ConnectionConfig, e: fred::error::Error) -> Error {
    let url = redacted_url(&config.url);
    if e.details().to_ascii_lowercase().contains("refused") {
        // Nothing listens there: no TLS hint would help.
        return Error::Redis(e);
    }
    let hint = if tls::url_wants_tls(&config.url) {
        let d = e.details().to_ascii_lowercase();
        if d.contains("certificate") || d.contains("unknownissuer") || d.contains("invalid peer") {
            "the server's TLS certificate was not accepted: give the CA that signed it (CA file), \
             or check the host name it was issued for"
        } else {
            "TLS handshake failed: is the server listening for TLS on this port? \
             (use redis:// for a plaintext server)"
        }
    } else if hung_up(&e) {
        "the server hung up: if it speaks TLS only, use rediss://"
    } else {
        // Unknown host, timeout, …: a connection error the caller may retry
        // and `diagnose` explains.
        return Error::Redis(e);
    };
    Error::Config(format!("cannot connect to {url}: {e} ({hint})"))
}

/// The server closed or reset the connection during the greeting: what a
/// TLS-only server does to a plaintext client.
fn hung_up(e: &fred::error::Error) -> bool {
    let d = e.details().to_ascii_lowercase();
    matches!(e.kind(), fred::error::ErrorKind::IO)
        && ["reset", "end of file", "eof", "broken pipe", "closed"]
            .iter()
            .any(|s| d.contains(s))
}

/// Per-call options of a blocking command: a client-side timeout just above the
/// block time, and no retry.
pub(crate) fn blocking_options(block: Duration) -> Options {
    Options {
        timeout: Some(block + Duration::from_millis(1500)),
        max_attempts: Some(1),
        ..Default::default()
    }
}

#[cfg(test)]
mod reply_tests {
    use super::*;
    use fred::bytes::Bytes;
    use fred::types::Resp3Frame as F;

    fn blob(s: &str) -> F {
        F::BlobString {
            data: Bytes::copy_from_slice(s.as_bytes()),
            attributes: None,
        }
    }

    /// The direct reading gives what fred's value reading gave, errors included.
    #[test]
    fn frames_read_as_their_values_do() {
        let error = || F::SimpleError {
            data: "NOSCRIPT No matching script".into(),
            attributes: None,
        };
        let frames = vec![
            F::Null,
            blob("x"),
            F::BlobString {
                data: Bytes::from_static(&[0xff, 0x00]),
                attributes: None,
            },
            F::SimpleString {
                data: Bytes::from_static(b"QUEUED"),
                attributes: None,
            },
            F::SimpleString {
                data: Bytes::from_static(b"OK"),
                attributes: None,
            },
            F::Number {
                data: -3,
                attributes: None,
            },
            F::Double {
                data: 1.5,
                attributes: None,
            },
            F::Boolean {
                data: true,
                attributes: None,
            },
            F::Array {
                data: vec![
                    F::Array {
                        data: vec![blob("name"), blob("n")],
                        attributes: None,
                    },
                    blob("7"),
                    F::Number {
                        data: 0,
                        attributes: None,
                    },
                ],
                attributes: None,
            },
            F::Array {
                data: vec![blob("a"), error()],
                attributes: None,
            },
            error(),
        ];
        for frame in frames {
            let direct = frame_to_reply(frame.clone());
            let via_value = Value::try_from(frame.clone()).map(to_reply);
            match (direct, via_value) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{frame:?}"),
                (Err(a), Err(b)) => {
                    assert_eq!(a.kind(), b.kind());
                    assert_eq!(a.details(), b.details());
                    assert!(is_noscript(&a));
                }
                (a, b) => panic!("{frame:?}: {a:?} vs {b:?}"),
            }
        }
    }
}
