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

use crate::config::ConnectionConfig;
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
            .field("url", &crate::config::redacted_url(&self.inner.config.url))
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
        let fred_config = Config::from_url(&config.url)?;
        let pool = builder(&fred_config, &config).build_pool(config.pool_size)?;
        pool.init().await?;
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
    /// named with `CLIENT SETNAME`.
    pub async fn dedicated_client(&self, name: Option<&str>) -> Result<Client> {
        // The shared builder already forbids replaying commands after a
        // reconnect, which a blocking read must never be.
        let client = builder(&self.inner.fred_config, &self.inner.config).build()?;
        client.init().await?;
        if let Some(name) = name {
            if let Err(e) = client.client_setname(name).await {
                // Servers that refuse CLIENT are tolerated, as BullMQ does.
                warn!(error = %e, "CLIENT SETNAME refused");
            }
        }
        Ok(client)
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
    /// retried once (the first attempt did nothing, so this is safe).
    pub async fn call<C: ScriptCall>(&self, call: &C) -> Result<C::Output> {
        let script = call.script();
        let def = script.def().ok_or(Error::MissingScript(script.name()))?;
        let args = evalsha_args(def.sha1, call);
        let client = self.inner.pool.next();
        let reply = match client.custom(evalsha_command(), args.clone()).await {
            Err(e) if is_noscript(&e) => {
                self.reload(client, script).await?;
                client.custom(evalsha_command(), args).await?
            }
            other => other?,
        };
        Ok(call.decode(to_reply(reply))?)
    }

    /// Runs many calls of one type in one pipelined round trip and returns
    /// each one's result in order. Calls refused with NOSCRIPT did nothing:
    /// exactly those are resent once after the scripts are loaded again.
    pub async fn call_batch<C: ScriptCall>(&self, calls: &[C]) -> Vec<Result<C::Output>> {
        if calls.is_empty() {
            return Vec::new();
        }
        let mut encoded = Vec::with_capacity(calls.len());
        for c in calls {
            match c.script().def() {
                Some(def) => encoded.push(evalsha_args(def.sha1, c)),
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
        let noscript: Vec<usize> = (0..raw.len())
            .filter(|&i| matches!(&raw[i], Err(e) if is_noscript(e)))
            .collect();
        if !noscript.is_empty() {
            if let Err(e) = self.load_scripts().await {
                return vec_of_errors(calls.len(), &e);
            }
            let again: Vec<Vec<Value>> = noscript.iter().map(|&i| encoded[i].clone()).collect();
            for (i, r) in noscript.into_iter().zip(pipeline(client, &again).await) {
                raw[i] = r;
            }
        }
        raw.into_iter()
            .zip(calls)
            .map(|(r, c)| Ok(c.decode(to_reply(r?))?))
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
fn evalsha_command() -> fred::types::CustomCommand {
    // Routed by the first key (after the hash and numkeys).
    fred::types::CustomCommand::new_static("EVALSHA", fred::types::ClusterHash::Offset(2), false)
}

/// `sha numkeys keys… args…`.
fn evalsha_args<C: ScriptCall>(sha: &str, call: &C) -> Vec<Value> {
    let keys = call.keys();
    debug_assert_eq!(
        keys.len(),
        call.script().num_keys(),
        "{} takes {} keys",
        call.script().name(),
        call.script().num_keys()
    );
    let args = call.args();
    let mut all: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
    all.push(Value::String(sha.into()));
    all.push(Value::Integer(keys.len() as i64));
    all.extend(keys.into_iter().map(|k| Value::String(k.into())));
    all.extend(args.into_iter().map(|a| Value::Bytes(a.into_bytes())));
    all
}

fn vec_of_errors<T>(n: usize, e: &Error) -> Vec<Result<T>> {
    let msg = e.to_string();
    (0..n)
        .map(|_| Err(Error::Config(format!("reloading scripts: {msg}"))))
        .collect()
}

async fn pipeline(
    client: &Client,
    encoded: &[Vec<Value>],
) -> Vec<std::result::Result<Value, fred::error::Error>> {
    let pipe = client.pipeline();
    for args in encoded {
        if let Err(e) = pipe.custom::<(), _>(evalsha_command(), args.clone()).await {
            return encoded.iter().map(|_| Err(e.clone())).collect();
        }
    }
    pipe.try_all::<Value>().await
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
    })
    .with_performance_config(|p| {
        p.default_command_timeout = config.command_timeout;
    })
    .set_policy(ReconnectPolicy::new_constant(0, delay));
    b
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
