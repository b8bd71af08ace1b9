//! The [`Relay`] actor: one node of a namespace.

use std::sync::Arc;

use echomq_protocol::call::relay::{
    Registration, RelayHeartbeat, RelayRegisterNode, RelayRemoveEndpoint, RelaySubscribe,
    RelaySweep, RelayTrimInbox, RelayUnregisterNode,
};
use echomq_protocol::relay::{check_pattern, RelayCode, RelayKeys, LAYOUT_VERSION};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::args::RelayArgs;
use super::client::RelayClient;
use super::error::{refused, RelayError};
use super::messages::{InboxBatch, RelayMsg, RelayStatus};
use super::reader::Reader;
use super::registry::{RelayMessage, RelayNotice, RelaySubscribers};
use crate::connection::pool::Connection;

/// Nodes a sweep removes at most per call (BullMQ's).
const SWEEP_LIMIT: u64 = 100;

/// Register calls while an earlier node of the id is pruned (100
/// subscriptions each): enough for a million subscriptions.
const REGISTER_ATTEMPTS: u32 = 10_000;

/// The actor. Spawn it under the host's supervisor; `spawn` returns once the
/// node is registered, its subscriptions (a restart's) restored and its
/// reader started. Contract: `docs/relay.md`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Relay;

/// Runtime state of a [`Relay`].
pub struct RelayState {
    args: RelayArgs,
    keys: Arc<RelayKeys>,
    client: RelayClient,
    subscribers: RelaySubscribers,
    cancel: CancellationToken,
    reader: Option<tokio::task::JoinHandle<()>>,
    /// A recovery failed part way: the next heartbeat does it again.
    recovery_pending: bool,
    delivered: u64,
    recoveries: u64,
}

impl RelayState {
    fn conn(&self) -> &Connection {
        &self.args.connection
    }

    fn node(&self) -> &str {
        &self.args.node_id
    }

    async fn register(&self) -> Result<(), RelayError> {
        let info = self.args.info_json();
        let call = RelayRegisterNode {
            keys: &self.keys,
            node: self.node(),
            lease_ms: ms(self.args.lease),
            info: &info,
            layout: LAYOUT_VERSION,
            inbox_max: self.args.inbox_max_length,
        };
        for _ in 0..REGISTER_ATTEMPTS {
            let r = refused("relayRegisterNode", self.conn().call(&call).await?)?;
            if r == Registration::Registered {
                self.client.touch_namespace(ms(self.args.lease)).await?;
                return Ok(());
            }
        }
        Err(RelayError::option(
            "node_id",
            "an earlier node of this id is still being pruned",
        ))
    }

    async fn subscribe_in_redis(
        &self,
        endpoint: &str,
        pattern: &str,
    ) -> Result<Result<echomq_protocol::call::relay::Subscribed, RelayCode>, RelayError> {
        Ok(self
            .conn()
            .call(&RelaySubscribe {
                keys: &self.keys,
                node: self.node(),
                endpoint,
                pattern,
            })
            .await?)
    }

    async fn remove_in_redis(&self, endpoint: &str) -> Result<u64, RelayError> {
        Ok(self
            .conn()
            .call(&RelayRemoveEndpoint {
                keys: &self.keys,
                node: self.node(),
                endpoint,
            })
            .await?)
    }

    /// The lease ran out: register anew and restore every subscription.
    /// Messages of the old registration still unread are not delivered
    /// (new epoch). Retained messages are not delivered again.
    async fn recover(&mut self) -> Result<(), RelayError> {
        self.recovery_pending = true;
        self.subscribers.new_epoch();
        self.register().await?;
        for (endpoint, pattern) in self.subscribers.patterns() {
            refused(
                "relaySubscribe",
                self.subscribe_in_redis(&endpoint, &pattern).await?,
            )?;
            // Unsubscribed meanwhile (a dropped channel): not restored.
            if !self.subscribers.has(&endpoint) {
                self.remove_in_redis(&endpoint).await?;
            }
        }
        self.recovery_pending = false;
        self.recoveries += 1;
        info!(node = %self.node(), namespace = %self.keys.namespace(), "relay node recovered");
        self.subscribers.notify(RelayNotice::Recovered);
        Ok(())
    }

    /// Trims the consumed entries, reports the backlog when it lags.
    async fn check_backlog(&self) -> Result<(), RelayError> {
        let cursor = self.subscribers.cursor().unwrap_or_else(|| "0-0".into());
        let backlog = self
            .conn()
            .call(&RelayTrimInbox {
                keys: &self.keys,
                node: self.node(),
                cursor: &cursor,
                max_len: self.args.inbox_max_length,
            })
            .await?;
        if backlog >= self.args.lag() {
            self.subscribers.notify(RelayNotice::Lag(backlog));
        }
        Ok(())
    }

    async fn heartbeat(&mut self) -> Result<(), RelayError> {
        let alive = self
            .conn()
            .call(&RelayHeartbeat {
                keys: &self.keys,
                node: self.node(),
                lease_ms: ms(self.args.lease),
            })
            .await?;
        if alive {
            self.client.touch_namespace(ms(self.args.lease)).await?;
        }
        if !alive || self.recovery_pending {
            self.recover().await?;
        }
        self.check_backlog().await
    }

    async fn subscribe(
        &mut self,
        pattern: &str,
        add: impl FnOnce(&RelaySubscribers, &str),
    ) -> Result<String, RelayError> {
        check_pattern(pattern)?;
        let endpoint = uuid::Uuid::new_v4().simple().to_string();
        // In the registry first: a batch delivered right after the script
        // finds the endpoint.
        add(&self.subscribers, &endpoint);
        let mut outcome = self.subscribe_in_redis(&endpoint, pattern).await;
        if matches!(outcome, Ok(Err(RelayCode::NodeNotRegistered))) {
            // The lease ran out under us: recover (which subscribes this
            // endpoint too) and read the retained message again.
            outcome = match self.recover().await {
                Ok(()) => self.subscribe_in_redis(&endpoint, pattern).await,
                Err(e) => Err(e),
            };
        }
        let subscribed = match outcome.and_then(|r| refused("relaySubscribe", r)) {
            Ok(s) => s,
            Err(e) => {
                self.subscribers.remove(&endpoint);
                if let Err(cleanup) = self.remove_in_redis(&endpoint).await {
                    self.recovery_pending = true;
                    warn!(error = %cleanup, "relay: removing a failed subscription failed");
                }
                return Err(e);
            }
        };
        if let Some(r) = subscribed.retained {
            match serde_json::from_str(&r.data) {
                Ok(data) => {
                    self.subscribers.deliver_to(
                        &endpoint,
                        RelayMessage {
                            topic: pattern.to_owned(),
                            mid: r.mid,
                            ts: r.ts,
                            data,
                            retained: true,
                        },
                    );
                }
                Err(e) => self.subscribers.notify(RelayNotice::Error(format!(
                    "retained data of {pattern}: {e}"
                ))),
            }
        }
        Ok(endpoint)
    }

    fn deliver(&mut self, me: &ActorRef<RelayMsg>, batch: InboxBatch) -> Vec<String> {
        let mut closed = Vec::new();
        if !self.subscribers.is_owner(me.get_id()) || batch.epoch != self.subscribers.epoch() {
            // Read under a replaced registration: read again, not delivered.
            return closed;
        }
        for entry in batch.entries {
            // Kinds of later layouts are not for this node.
            if entry.kind == "msg" {
                match serde_json::from_str::<serde_json::Value>(&entry.data) {
                    Ok(data) => {
                        for endpoint in &entry.endpoints {
                            let m = RelayMessage {
                                topic: entry.topic.clone(),
                                mid: entry.mid.clone(),
                                ts: entry.ts,
                                data: data.clone(),
                                retained: false,
                            };
                            if !self.subscribers.deliver_to(endpoint, m) {
                                closed.push(endpoint.clone());
                            }
                        }
                    }
                    Err(e) => self.subscribers.notify(RelayNotice::Error(format!(
                        "message {} on {}: data is not JSON: {e}",
                        entry.mid, entry.topic
                    ))),
                }
            }
            self.subscribers.advance(me.get_id(), &entry.id);
            self.delivered += 1;
        }
        closed
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RelayState {
    fn status(&self) -> RelayStatus {
        RelayStatus {
            node_id: self.args.node_id.clone(),
            namespace: self.args.namespace.clone(),
            endpoints: self.subscribers.len(),
            cursor: self.subscribers.cursor(),
            delivered: self.delivered,
            recoveries: self.recoveries,
        }
    }

    /// Stops the reader and leaves the namespace (the lease expires if the
    /// unregistering fails).
    async fn close(&mut self, me: &ActorRef<RelayMsg>) {
        // Not awaited: the reader may be waiting on this actor with a
        // batch. It stops at its next step and unblocks its client.
        self.cancel.cancel();
        self.reader.take();
        let gone = self
            .conn()
            .call(&RelayUnregisterNode {
                keys: &self.keys,
                node: self.node(),
            })
            .await;
        if let Err(e) = gone {
            warn!(error = %e, "relay: unregistering failed; the lease will expire");
        }
        self.subscribers.close(me.get_id());
    }

    /// One bounded sweep of dead nodes, told to the subscribers.
    async fn sweep(&mut self) {
        let r = self
            .conn()
            .call(&RelaySweep {
                keys: &self.keys,
                limit: SWEEP_LIMIT,
            })
            .await;
        match r {
            Ok(removed) if !removed.is_empty() => {
                info!(nodes = ?removed, "relay: swept dead nodes");
                self.subscribers.notify(RelayNotice::Swept(removed));
            }
            Ok(_) => {}
            Err(e) => report::<()>(&self.subscribers, "sweep", Err(e.into())),
        }
    }

    /// Endpoints whose receiver is gone leave Redis; a non-empty batch may
    /// have grown the inbox past its bound.
    async fn after_delivery(&mut self, closed: Vec<String>, had_entries: bool) {
        for endpoint in closed {
            let r = self.remove_in_redis(&endpoint).await.map(drop);
            report(&self.subscribers, "unsubscribe", r);
        }
        if had_entries {
            let r = self.check_backlog().await;
            report(&self.subscribers, "inbox trim", r);
        }
    }
}

fn report<T>(subs: &RelaySubscribers, what: &str, r: Result<T, RelayError>) {
    if let Err(e) = r {
        warn!(error = %e, "relay {what} failed; retried on the next tick");
        subs.notify(RelayNotice::Error(format!("{what}: {e}")));
    }
}

impl Actor for Relay {
    type Msg = RelayMsg;
    type State = RelayState;
    type Arguments = RelayArgs;

    async fn pre_start(
        &self,
        me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        args.validate()?;
        let keys = Arc::new(args.keys()?);
        let client = RelayClient::new(&args.connection, &args.namespace)?
            .with_max_message_size(args.max_message_size)
            .with_inbox_max_length(args.inbox_max_length);
        let subscribers = args.subscribers.clone();
        subscribers.attach(me.get_id());
        let mut state = RelayState {
            keys,
            client,
            subscribers,
            cancel: CancellationToken::new(),
            reader: None,
            recovery_pending: false,
            delivered: 0,
            recoveries: 0,
            args,
        };
        // A restart within the lease finds the node alive: its routes and
        // inbox are intact and it goes on after the last entry delivered.
        // Past the lease it registers anew, and its endpoints (kept in the
        // registry) are restored as after any lost lease.
        let alive = state
            .conn()
            .call(&RelayHeartbeat {
                keys: &state.keys,
                node: state.node(),
                lease_ms: ms(state.args.lease),
            })
            .await
            .map_err(RelayError::from)?;
        if !alive && !state.subscribers.is_empty() {
            state.recover().await?;
        } else {
            state.register().await?;
            for (endpoint, pattern) in state.subscribers.patterns() {
                refused(
                    "relaySubscribe",
                    state.subscribe_in_redis(&endpoint, &pattern).await?,
                )?;
            }
        }
        let reader = Reader {
            conn: state.args.connection.clone(),
            keys: state.keys.clone(),
            node: state.args.node_id.clone(),
            block: state.args.block,
            subscribers: state.subscribers.clone(),
            cancel: state.cancel.clone(),
        };
        state.reader = Some(tokio::spawn(reader.run(me.clone())));
        me.send_after(state.args.heartbeat_every(), || RelayMsg::Heartbeat);
        me.send_after(state.args.sweep_every(), || RelayMsg::Sweep);
        debug!(node = %state.node(), namespace = %state.keys.namespace(), "relay node started");
        Ok(state)
    }

    async fn post_stop(
        &self,
        _me: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The reader ends by itself (it unblocks its client first); a crash
        // leaves the node registered until its lease runs out or a
        // restarted actor takes it over.
        state.cancel.cancel();
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RelayMsg::Subscribe {
                pattern,
                capacity,
                reply,
            } => {
                let mut made = None;
                let r = state
                    .subscribe(&pattern, |subs, endpoint| {
                        made = Some(subs.add_channel(endpoint, &pattern, capacity));
                    })
                    .await;
                let _ = reply.send(r.and_then(|_| made.ok_or(RelayError::Closed)));
            }
            RelayMsg::SubscribeActor {
                pattern,
                sink,
                reply,
            } => {
                let r = state
                    .subscribe(&pattern, |subs, endpoint| {
                        subs.add_callback(endpoint, &pattern, sink)
                    })
                    .await;
                let _ = reply.send(r);
            }
            RelayMsg::Unsubscribe(endpoint, reply) => {
                let mine = state.subscribers.remove(&endpoint);
                let r = state.remove_in_redis(&endpoint).await.map(|_| mine);
                let _ = reply.send(r);
            }
            RelayMsg::Publish {
                topic,
                data,
                retain,
                reply,
            } => {
                let _ = reply.send(state.client.publish(&topic, &data, retain).await);
            }
            RelayMsg::DeleteRetained(topic, reply) => {
                let _ = reply.send(state.client.delete_retained(&topic).await);
            }
            RelayMsg::GetStatus(reply) => {
                let _ = reply.send(state.status());
            }
            RelayMsg::Close(reply) => {
                state.close(&me).await;
                let _ = reply.send(());
                me.stop(Some(crate::supervision::decision::CLOSED.into()));
            }
            #[cfg(feature = "fault-injection")]
            RelayMsg::Crash => panic!("fault injection: relay crash"),
            RelayMsg::Heartbeat => {
                let r = state.heartbeat().await;
                report(&state.subscribers, "heartbeat", r);
                me.send_after(state.args.heartbeat_every(), || RelayMsg::Heartbeat);
            }
            RelayMsg::Sweep => {
                state.sweep().await;
                me.send_after(state.args.sweep_every(), || RelayMsg::Sweep);
            }
            RelayMsg::Batch(batch, reply) => {
                let had = !batch.entries.is_empty();
                let closed = state.deliver(&me, batch);
                // The reader goes on at once; the clean-up below is ours.
                let _ = reply.send(());
                state.after_delivery(closed, had).await;
            }
        }
        Ok(())
    }
}
