//! One shared fred pool for everything, dedicated clients for blocking reads,
//! and the frozen scripts loaded into Redis.
//!
//! Scripts are `SCRIPT LOAD`ed when the connection is made (on every primary in
//! cluster mode) and called with `EVALSHA`. A `NOSCRIPT` reply (Redis restart,
//! failover, `SCRIPT FLUSH`) reloads the script and retries once.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::ScriptId;
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
            .field("url", &self.inner.config.url)
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

    /// Runs one script of the catalogue by EVALSHA and returns its raw reply.
    ///
    /// Low level: the typed APIs (Queue, Worker, actors) are built on it; tools
    /// and tests use it to drive a script directly. On NOSCRIPT the script is
    /// loaded again and the call retried once; the first attempt did nothing,
    /// so this is safe.
    pub async fn run_script(
        &self,
        id: ScriptId,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value> {
        let def = id.def().ok_or(Error::MissingScript(id.name()))?;
        debug_assert_eq!(
            keys.len(),
            id.num_keys(),
            "{} takes {} keys",
            id.name(),
            id.num_keys()
        );
        let client = self.inner.pool.next();
        match evalsha(client, def.sha1, &keys, &args).await {
            Err(e) if is_noscript(&e) => {
                warn!(script = id.name(), "NOSCRIPT: reloading");
                if client.is_clustered() {
                    client.script_load_cluster::<(), _>(def.source).await?;
                } else {
                    client.script_load::<String, _>(def.source).await?;
                }
                Ok(evalsha(client, def.sha1, &keys, &args).await?)
            }
            other => Ok(other?),
        }
    }

    /// Closes every client of the pool.
    pub async fn close(&self) {
        let _ = self.inner.pool.quit().await;
    }

    /// The client's wall clock in ms: every timestamp of the protocol is the
    /// client's, never Redis `TIME`.
    pub fn now_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// EVALSHA as a raw command. fred's typed `evalsha` is never pipelined: it
/// waits for each reply before the next command goes out on that connection,
/// because a NOSCRIPT inside a pipeline cannot be retried in place. Every call
/// here is retried on its own after a NOSCRIPT (it did nothing), so pipelining
/// is safe — and it lets concurrent jobs share a connection and a Redis read,
/// which is most of the Redis CPU per job at high concurrency.
pub(crate) async fn evalsha(
    client: &Client,
    sha: &str,
    keys: &[String],
    args: &[Value],
) -> Result<Value, fred::error::Error> {
    client
        .custom(evalsha_command(), evalsha_args(sha, keys, args))
        .await
}

/// The raw EVALSHA command, routed by the first key (after hash and numkeys).
pub(crate) fn evalsha_command() -> fred::types::CustomCommand {
    fred::types::CustomCommand::new_static("EVALSHA", fred::types::ClusterHash::Offset(2), false)
}

/// `sha numkeys keys… args…`.
pub(crate) fn evalsha_args(sha: &str, keys: &[String], args: &[Value]) -> Vec<Value> {
    let mut all: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
    all.push(Value::String(sha.into()));
    all.push(Value::Integer(keys.len() as i64));
    all.extend(keys.iter().map(|k| Value::String(k.as_str().into())));
    all.extend(args.iter().cloned());
    all
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
