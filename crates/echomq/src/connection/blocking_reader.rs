//! One reconnecting reader for every blocking loop of the runtime: the
//! QueueEvents and GroupFeeder stream reads, the Relay's inbox wake-up, the
//! worker's marker read and its cancel subscription.
//!
//! A blocking call (`XREAD BLOCK`, `BZPOPMIN`, a subscription) holds its
//! connection for as long as it waits, so each loop reads on a dedicated
//! client of its own. What every loop needs around that client lives here,
//! once:
//!
//! * the client is opened with its name (`CLIENT SETNAME`), and named again
//!   whenever it comes back without one: after fred reconnected it, and when a
//!   failed read made the reader replace it. BullMQ's `getWorkers` and the
//!   dashboard find workers and readers by these names.
//! * a call the cluster refused without running it (MOVED, ASK, TRYAGAIN,
//!   CLUSTERDOWN while a slot moves or fails over) keeps the client and is
//!   read again after [`redirect::pause`](super::redirect::pause): fred has
//!   refreshed its slot map and the read goes to the slot's new owner.
//! * any other failure replaces the client; the next open waits as a
//!   [`RetryPolicy`] says (doubling from the loop's own pause), so a Redis that
//!   is down is not hammered and one that is back is read again at once.
//! * a connection that blocks on a known key can be unblocked server-side
//!   (`CLIENT UNBLOCK` through the pool, on the node that serves the key)
//!   before it is quit, since its own connection is busy with the read.
//! * a [`CancellationToken`] ends every wait of the reader.
//!
//! The loops keep what is theirs: what they read, their cursors, what they
//! do with a batch and their log lines.

use std::future::Future;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::{Client, ClientInterface, ClientLike, EventInterface, Options, Value};
use fred::types::config::Server;
use fred::types::ClientUnblockFlag;
use tokio::sync::broadcast::Receiver;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::pool::Connection;
use super::redirect::{pause as refusal_pause, refused_by_cluster};
use super::retry::RetryPolicy;
use crate::error::{Error, Result};
use crate::sync::lock;

/// The longest pause before a failed client is reopened: a Redis that is
/// back is read again within this time.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(2);

/// The server-side id of a connection, and the cluster node that gave it
/// (`None` on a single server): ids are per node.
pub(crate) type ClientId = (Option<Server>, i64);

/// A fred client a [`BlockingReader`] can hold.
pub(crate) trait ReaderClient:
    ClientLike + ClientInterface + EventInterface + Clone + Send + Sync + 'static
{
    /// A new dedicated client, named `name` when the kind supports it.
    fn open(conn: &Connection, name: Option<&str>) -> impl Future<Output = Result<Self>> + Send;

    /// `CLIENT SETNAME` again, on a connection that came back without it.
    fn rename(&self, conn: &Connection, name: &str) -> impl Future<Output = ()> + Send;

    /// The primary serving `key`'s slot on a cluster, `None` on one server.
    fn node_for_key(&self, key: &str) -> Option<Server>;
}

impl ReaderClient for Client {
    async fn open(conn: &Connection, name: Option<&str>) -> Result<Self> {
        conn.dedicated_client(name).await
    }

    async fn rename(&self, conn: &Connection, name: &str) {
        conn.name_client(self, name).await;
    }

    fn node_for_key(&self, key: &str) -> Option<Server> {
        Connection::node_for_key(self, key)
    }
}

/// A subscription: fred resubscribes it by itself after a reconnect. It is
/// never named, so that it is not counted as a worker by name.
impl ReaderClient for SubscriberClient {
    async fn open(conn: &Connection, _name: Option<&str>) -> Result<Self> {
        conn.subscriber().await
    }

    async fn rename(&self, _conn: &Connection, _name: &str) {}

    fn node_for_key(&self, _key: &str) -> Option<Server> {
        None
    }
}

/// What one [`BlockingReader::read`] came to.
#[derive(Debug)]
pub(crate) enum Read<T> {
    /// The call answered.
    Value(T),
    /// The cluster refused the call without running it; the client stays and
    /// the reader has paused before the caller reads again.
    Refused,
    /// The client could not be opened, or the call failed: the client is
    /// replaced, after the backoff, by the next read.
    Failed(Error),
    /// The reader's token was cancelled.
    Stopped,
}

struct Open<C> {
    client: C,
    id: Option<ClientId>,
    reconnects: Receiver<Server>,
}

struct State<C> {
    open: Option<Open<C>>,
    /// Failed opens and reads since the last answer: the backoff's attempt.
    failures: u32,
    /// Cluster refusals since the last answer: the refusal pause's round.
    refusals: u32,
}

/// A dedicated client for one blocking loop, reopened (with its name) when it
/// fails; see the module comment.
pub(crate) struct BlockingReader<C: ReaderClient = Client> {
    conn: Connection,
    name: Option<String>,
    /// The key the reads block on, when the connection must be unblockable.
    route_key: Option<String>,
    policy: RetryPolicy,
    cancel: CancellationToken,
    state: std::sync::Mutex<State<C>>,
}

impl<C: ReaderClient> BlockingReader<C> {
    /// An unnamed reader on `conn` that reopens after the pool's reconnect
    /// delay, doubling up to [`MAX_PAUSE`].
    pub fn new(conn: Connection) -> Self {
        let policy = RetryPolicy {
            initial_delay: conn.config().reconnect_delay,
            max_delay: MAX_PAUSE,
            deadline: None,
        };
        BlockingReader {
            conn,
            name: None,
            route_key: None,
            policy,
            cancel: CancellationToken::new(),
            state: std::sync::Mutex::new(State {
                open: None,
                failures: 0,
                refusals: 0,
            }),
        }
    }

    /// Opens every client with `CLIENT SETNAME name`.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The reads block on `key`: the connection's id is kept (asked again
    /// from the new owner when the key's slot moved) so that it can be
    /// unblocked when it is dropped.
    pub fn unblocks_on(mut self, key: impl Into<String>) -> Self {
        self.route_key = Some(key.into());
        self
    }

    /// The first pause before reopening after a failure (doubling from there).
    pub fn first_pause(mut self, pause: Duration) -> Self {
        self.policy.initial_delay = pause;
        self
    }

    /// The longest pause before reopening (default [`MAX_PAUSE`]).
    pub fn max_pause(mut self, pause: Duration) -> Self {
        self.policy.max_delay = pause;
        self
    }

    /// Ends every wait of the reader when `token` is cancelled.
    pub fn stop_on(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Sleeps `d` unless the token ends it first; `false` when stopped.
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.cancel.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// The client, opened (and named) when there is none, after the backoff
    /// when the last open or read failed; named again when fred reconnected
    /// it, since the new connection has no name.
    pub async fn client(&self) -> Read<C> {
        if self.cancel.is_cancelled() {
            return Read::Stopped;
        }
        let (current, failures) = {
            let mut st = lock(&self.state);
            let failures = st.failures;
            let current = st.open.as_mut().map(|o| {
                let mut reconnected = false;
                while o.reconnects.try_recv().is_ok() {
                    reconnected = true;
                }
                let id_node = o.id.as_ref().and_then(|(node, _)| node.clone());
                (o.client.clone(), reconnected, id_node)
            });
            (current, failures)
        };
        if let Some((client, reconnected, id_node)) = current {
            self.refresh(&client, reconnected, id_node).await;
            return Read::Value(client);
        }
        if failures > 0 && !self.sleep(self.policy.delay(failures)).await {
            return Read::Stopped;
        }
        let opened = tokio::select! {
            _ = self.cancel.cancelled() => return Read::Stopped,
            c = C::open(&self.conn, self.name.as_deref()) => c,
        };
        let client = match opened {
            Ok(c) => c,
            Err(e) => {
                lock(&self.state).failures = failures.saturating_add(1);
                return Read::Failed(e);
            }
        };
        let id = self.client_id(&client).await;
        if let Some(name) = &self.name {
            info!(client_id = ?id.as_ref().map(|(_, id)| *id), name, "blocking connection opened");
        }
        let reconnects = client.reconnect_rx();
        let replaced = lock(&self.state).open.replace(Open {
            client: client.clone(),
            id,
            reconnects,
        });
        if let Some(old) = replaced {
            // Two opens raced: the older client is not read on any more.
            self.drop_client(old);
        }
        Read::Value(client)
    }

    /// After fred reconnected the client: its name and id again. After the
    /// route key's slot moved: the id from the new owner.
    async fn refresh(&self, client: &C, reconnected: bool, id_node: Option<Server>) {
        let moved = self
            .route_key
            .as_deref()
            .is_some_and(|key| id_node != client.node_for_key(key));
        if !reconnected && !moved {
            return;
        }
        if reconnected {
            if let Some(name) = &self.name {
                client.rename(&self.conn, name).await;
            }
        }
        let id = self.client_id(client).await;
        if reconnected {
            if let Some(name) = &self.name {
                info!(client_id = ?id.as_ref().map(|(_, id)| *id), name, "blocking connection reconnected and renamed");
            }
        }
        if let Some(open) = lock(&self.state).open.as_mut() {
            open.id = id;
        }
    }

    /// The server-side id of the connection that blocks on the route key,
    /// with the node that serves it; `None` without a route key.
    async fn client_id(&self, client: &C) -> Option<ClientId> {
        let key = self.route_key.as_deref()?;
        match client.node_for_key(key) {
            Some(node) => {
                let on_node = client.with_options(&Options {
                    cluster_node: Some(node.clone()),
                    ..Default::default()
                });
                let id = on_node.client_id().await.ok()?;
                Some((Some(node), id))
            }
            None => Some((None, client.client_id().await.ok()?)),
        }
    }

    /// One blocking call on the reader's client (see [`Read`]).
    pub async fn read<T, F, Fut>(&self, call: F) -> Read<T>
    where
        F: FnOnce(C) -> Fut,
        Fut: Future<Output = std::result::Result<T, fred::error::Error>>,
    {
        let client = match self.client().await {
            Read::Value(c) => c,
            Read::Failed(e) => return Read::Failed(e),
            Read::Refused | Read::Stopped => return Read::Stopped,
        };
        let answer = tokio::select! {
            _ = self.cancel.cancelled() => return Read::Stopped,
            r = call(client) => r,
        };
        match answer {
            Ok(v) => {
                let mut st = lock(&self.state);
                st.failures = 0;
                st.refusals = 0;
                Read::Value(v)
            }
            Err(e) if refused_by_cluster(&e) => {
                let round = {
                    let mut st = lock(&self.state);
                    st.refusals = st.refusals.saturating_add(1);
                    st.refusals
                };
                debug!(name = ?self.name, error = %e, round, "read refused by the cluster; reading again");
                if self.sleep(refusal_pause(round)).await {
                    Read::Refused
                } else {
                    Read::Stopped
                }
            }
            Err(e) => {
                self.fail();
                Read::Failed(e.into())
            }
        }
    }

    /// Drops the client after a failure: the next open waits the backoff.
    pub fn fail(&self) {
        let open = {
            let mut st = lock(&self.state);
            st.failures = st.failures.saturating_add(1);
            st.open.take()
        };
        if let Some(open) = open {
            self.drop_client(open);
        }
    }

    /// Drops the client (the next read opens a fresh one at once): unblocked
    /// and quit in the background.
    pub fn discard(&self) {
        if let Some(open) = lock(&self.state).open.take() {
            self.drop_client(open);
        }
    }

    /// Drops the client and waits (2 s at most) until it is quit.
    pub async fn close(&self) {
        let open = lock(&self.state).open.take();
        if let Some(open) = open {
            end(self.conn.clone(), open).await;
        }
    }

    fn drop_client(&self, open: Open<C>) {
        tokio::spawn(end(self.conn.clone(), open));
    }
}

/// Unblocks a connection that may sit in a blocking read (through the pool,
/// on the node that gave its id, the only one that knows it), then quits it.
async fn end<C: ReaderClient>(conn: Connection, open: Open<C>) {
    if let Some((node, id)) = open.id {
        let next = conn.pool().next();
        let flag = Some(ClientUnblockFlag::Timeout);
        let _ = match node {
            Some(node) => {
                next.with_cluster_node(&node)
                    .client_unblock::<Value, _>(id, flag)
                    .await
            }
            None => next.client_unblock::<Value, _>(id, flag).await,
        };
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), open.client.quit()).await;
}
