//! The QueueEvents actor: its arguments, messages and the reader task it
//! owns (`XREAD BLOCK` on a dedicated client), casting each batch to the
//! actor, which fans it out to the subscribers of its registry.

use std::time::Duration;

use echomq_protocol::{Event, EventKind, QueueKeys};
use fred::prelude::{ClientLike, StreamsInterface, Value};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::warn;

use super::delivery::{Delivery, Subscription};
use super::subscribers::Subscribers;
use crate::connection::blocking_reader::{BlockingReader, Read};
use crate::connection::pool::{blocking_options, Connection};
use crate::error::Result;

/// First pause before the reader reconnects after a failed read.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// Where a new QueueEvents starts reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// Only events appended after the actor started (`$`, resolved at start).
    Now,
    /// Every event after this stream id (a saved cursor).
    After(String),
}

/// Arguments of a [`QueueEvents`] actor. Keep them to restart it: clones share
/// the [`Subscribers`] registry, so the restarted actor serves the same
/// subscribers from where its predecessor stopped.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct QueueEventsArgs {
    /// The shared connection (a dedicated blocking client is made from it).
    pub connection: Connection,
    /// The queue whose stream is read.
    pub queue: String,
    /// Start position of a first start. Default [`StartFrom::Now`]. Once the
    /// registry has delivered an entry, a (re)start resumes after it instead.
    pub start: StartFrom,
    /// XREAD block time, capped at 10 s. Default 10 s (as BullMQ Node).
    pub block: Duration,
    /// Entries per XREAD. Default 1000.
    pub batch: u64,
    /// The subscribers, shared by every actor spawned from these arguments
    /// (or their clones). Default: a new, empty registry.
    pub subscribers: Subscribers,
    /// Decodes `completed` events' return values stored through a payload
    /// codec or offloaded (docs/operations.md §Memory), as the queue's
    /// workers stored them. Default: handed over as stored.
    #[cfg(feature = "codec")]
    pub codec: Option<crate::codec::CodecOptions>,
}

impl QueueEventsArgs {
    /// Defaults for `queue`.
    pub fn new(connection: Connection, queue: impl Into<String>) -> Self {
        Self {
            connection,
            queue: queue.into(),
            start: StartFrom::Now,
            block: Duration::from_secs(10),
            batch: 1000,
            subscribers: Subscribers::new(),
            #[cfg(feature = "codec")]
            codec: None,
        }
    }

    /// Sets [`QueueEventsArgs::codec`].
    #[cfg(feature = "codec")]
    pub fn codec(mut self, codec: crate::codec::CodecOptions) -> Self {
        self.codec = Some(codec);
        self
    }

    /// Sets [`QueueEventsArgs::start`].
    pub fn start(mut self, start: StartFrom) -> Self {
        self.start = start;
        self
    }

    /// Sets [`QueueEventsArgs::block`].
    pub fn block(mut self, block: Duration) -> Self {
        self.block = block;
        self
    }

    /// Sets [`QueueEventsArgs::batch`].
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// Sets [`QueueEventsArgs::subscribers`] (a registry the host subscribed
    /// to before spawning).
    pub fn subscribers(mut self, subscribers: Subscribers) -> Self {
        self.subscribers = subscribers;
        self
    }
}

/// Why a QueueEvents did not start: the typed error inside ractor's
/// `SpawnErr::StartupFailed` (Redis errors arrive as [`Error`](crate::Error)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueEventsError {
    /// `StartFrom::After` holds something that is not a stream id (`<ms>-<seq>` or `<ms>`).
    #[error("invalid stream id {0:?}")]
    InvalidStreamId(String),
}

/// Messages of the [`QueueEvents`] actor.
pub enum QueueEventsMsg {
    /// Subscribe with a bounded buffer of `capacity` deliveries (same as
    /// [`Subscribers::subscribe`] on the actor's registry).
    Subscribe(usize, RpcReplyPort<Subscription>),
    /// Subscribe a host actor: `convert` maps a delivery to the host's message
    /// (or `None` to skip it). Deliveries are cast; a stopped actor is dropped.
    SubscribeActor(
        Box<dyn Fn(Delivery) -> bool + Send + Sync>,
        RpcReplyPort<u64>,
    ),
    /// Drop a subscription.
    Unsubscribe(u64),
    /// Reply with the id of the last entry delivered (the resume cursor).
    GetLastId(RpcReplyPort<String>),
    /// Stop reading and stop the actor (reason `"closed"`); every
    /// subscription ends.
    Close,
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
    /// A batch from the reader task (internal).
    Batch(Vec<Event>, Option<(String, String)>),
}

impl std::fmt::Debug for QueueEventsMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueEventsMsg::Subscribe(c, _) => write!(f, "Subscribe({c})"),
            QueueEventsMsg::SubscribeActor(..) => write!(f, "SubscribeActor"),
            QueueEventsMsg::Unsubscribe(id) => write!(f, "Unsubscribe({id})"),
            QueueEventsMsg::GetLastId(_) => write!(f, "GetLastId"),
            QueueEventsMsg::Close => write!(f, "Close"),
            #[cfg(feature = "fault-injection")]
            QueueEventsMsg::Crash => write!(f, "Crash"),
            QueueEventsMsg::Batch(b, g) => write!(f, "Batch({} events, gap {g:?})", b.len()),
        }
    }
}

/// The actor. Spawn it under the host's supervisor; `spawn` returns once the
/// start position is fixed.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueEvents;

/// Runtime state: the cursor and the subscriber registry.
pub struct QueueEventsState {
    last_id: String,
    subscribers: Subscribers,
    reader: Option<tokio::task::JoinHandle<()>>,
    metrics: crate::telemetry::metrics::QueueMetrics,
}

impl Actor for QueueEvents {
    type Msg = QueueEventsMsg;
    type State = QueueEventsState;
    type Arguments = QueueEventsArgs;

    async fn pre_start(
        &self,
        me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        let keys = QueueKeys::new(args.connection.prefix(), &args.queue)?;
        let stream = keys.events();
        // A registry that has delivered before decides where to resume: its
        // subscribers must neither miss nor see twice an entry.
        let start = match args.subscribers.attach(me.get_id()) {
            Some(id) => StartFrom::After(id),
            None => args.start.clone(),
        };
        let last_id = match &start {
            StartFrom::After(id) => {
                parse_id(id).ok_or_else(|| QueueEventsError::InvalidStreamId(id.clone()))?;
                id.clone()
            }
            // Resolving `$` here, before spawn returns, is what makes the actor
            // ready before its first event: nothing appended later is missed.
            StartFrom::Now => last_entry_id(&args.connection, &stream).await?,
        };
        // Opened now, so that a server that refuses it fails the start.
        let reader = BlockingReader::new(args.connection.clone())
            .named(keys.events_client_name())
            .first_pause(RECONNECT_PAUSE);
        if let Read::Failed(e) = reader.client().await {
            return Err(e.into());
        }
        let block = args
            .block
            .min(Duration::from_secs(10))
            .max(Duration::from_millis(1));
        let reader = tokio::spawn(read_loop(
            me,
            args.connection.clone(),
            reader,
            stream,
            last_id.clone(),
            ReadSettings {
                block,
                batch: args.batch.max(1),
                #[cfg(feature = "codec")]
                codec: args.codec.clone(),
            },
        ));
        Ok(QueueEventsState {
            last_id,
            subscribers: args.subscribers,
            reader: Some(reader),
            metrics: crate::telemetry::metrics::QueueMetrics::new(&args.queue),
        })
    }

    async fn post_stop(
        &self,
        _me: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if let Some(r) = state.reader.take() {
            r.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            QueueEventsMsg::Subscribe(capacity, reply) => {
                let _ = reply.send(state.subscribers.subscribe(capacity));
            }
            QueueEventsMsg::SubscribeActor(f, reply) => {
                let _ = reply.send(state.subscribers.subscribe_boxed(f));
            }
            QueueEventsMsg::Unsubscribe(id) => {
                state.subscribers.unsubscribe(id);
            }
            #[cfg(feature = "fault-injection")]
            QueueEventsMsg::Crash => panic!("fault injection: queue events crash"),
            QueueEventsMsg::GetLastId(reply) => {
                let _ = reply.send(state.last_id.clone());
            }
            QueueEventsMsg::Close => {
                if let Some(r) = state.reader.take() {
                    r.abort();
                }
                state.subscribers.close(me.get_id());
                me.stop(Some(crate::supervision::decision::CLOSED.into()));
            }
            QueueEventsMsg::Batch(events, gap) => {
                let _span = tracing::debug_span!("events_batch", events = events.len()).entered();
                let written_ms = events
                    .last()
                    .and_then(|e| parse_id(&e.id))
                    .map(|(ms, _)| ms);
                state.metrics.events_delivered(written_ms, gap.is_some());
                if let Some(last) = events.last() {
                    state.last_id = last.id.clone();
                }
                let gap = gap.map(|(after, next)| Delivery::Gap { after, next });
                let missed = state.subscribers.deliver(me.get_id(), gap, events);
                state.metrics.events_missed(missed);
            }
        }
        Ok(())
    }
}

/// Replaces each `completed` event's stored return value by its plain value.
/// One that cannot be decoded is handed over as stored (a warning says why):
/// the event itself is a fact a subscriber must not lose.
#[cfg(feature = "codec")]
async fn decode_return_values(codec: &crate::codec::CodecOptions, events: &mut [Event]) {
    for e in events {
        if let EventKind::Completed {
            job_id,
            return_value,
            ..
        } = &mut e.kind
        {
            match codec.load(return_value).await {
                None => {}
                Some(Ok(plain)) => *return_value = plain,
                Some(Err(err)) => {
                    warn!(%job_id, error = %err, "completed event's return value not decoded")
                }
            }
        }
    }
}

/// How the reader reads: its XREAD's block and count, and the codec of
/// `completed` return values.
struct ReadSettings {
    block: Duration,
    batch: u64,
    #[cfg(feature = "codec")]
    codec: Option<crate::codec::CodecOptions>,
}

/// The reader: XREAD BLOCK in a loop on its own client. Exits when the actor
/// is gone (a failed cast). After a failed read the [`BlockingReader`] opens a
/// fresh client (named as the first) and the loop resumes from its cursor,
/// checking for a trimmed gap.
async fn read_loop(
    me: ActorRef<QueueEventsMsg>,
    conn: Connection,
    reader: BlockingReader,
    stream: String,
    mut cursor: String,
    settings: ReadSettings,
) {
    let ReadSettings {
        block,
        batch,
        #[cfg(feature = "codec")]
        codec,
    } = settings;
    let opts = blocking_options(block);
    let mut check_gap = true;
    loop {
        let gap = if check_gap {
            trimmed_past(&conn, &stream, &cursor).await
        } else {
            None
        };
        let (from, key, opts) = (cursor.clone(), stream.clone(), &opts);
        let read = reader
            .read(|client| async move {
                client
                    .with_options(opts)
                    .xread::<Value, _, _>(
                        Some(batch),
                        Some(block.as_millis() as u64),
                        key.as_str(),
                        from.as_str(),
                    )
                    .await
            })
            .await;
        match read {
            Read::Value(v) => {
                #[allow(unused_mut)]
                let mut events = parse_xread(v);
                #[cfg(feature = "codec")]
                if let Some(codec) = &codec {
                    decode_return_values(codec, &mut events).await;
                }
                if let Some(last) = events.last() {
                    cursor = last.id.clone();
                }
                // A full batch means we are behind: the stream may be trimming
                // past us, so look before the next read.
                check_gap = events.len() as u64 >= batch;
                if (!events.is_empty() || gap.is_some())
                    && me.cast(QueueEventsMsg::Batch(events, gap)).is_err()
                {
                    break;
                }
            }
            // The stream's slot is moving or failing over: the same cursor is
            // read again once the slot has settled.
            Read::Refused => {
                if me.get_status() != ractor::ActorStatus::Running {
                    break;
                }
            }
            Read::Failed(e) => {
                warn!(stream = %stream, error = %e, "XREAD failed; reconnecting");
                if me.get_status() != ractor::ActorStatus::Running {
                    break;
                }
                check_gap = true;
            }
            Read::Stopped => break,
        }
    }
    reader.close().await;
}

/// `Some((cursor, first))` when entries after `cursor` may have been trimmed
/// away. Trimming removes the oldest entries, so while the cursor's own entry
/// still exists nothing after it is gone. Once it is gone and the first entry
/// left is newer, entries in between may be lost; Redis keeps no count of
/// trimmed ids (`max-deleted-entry-id` only follows XDEL), so this is reported
/// conservatively: a gap may be empty, a lost entry is never silent.
async fn trimmed_past(conn: &Connection, stream: &str, cursor: &str) -> Option<(String, String)> {
    let client = conn.pool();
    let cur = parse_id(cursor)?;
    if cur == (0, 0) {
        return None;
    }
    let own: Value = client.xrange(stream, cursor, cursor, Some(1)).await.ok()?;
    if parse_xrange_first(own).is_some() {
        return None;
    }
    let first: Value = client.xrange(stream, "-", "+", Some(1)).await.ok()?;
    let first_id = parse_xrange_first(first)?;
    (parse_id(&first_id)? > cur).then(|| (cursor.to_owned(), first_id))
}

/// The jobs whose run the events end: completed, failed or removed (what the
/// followers of a queue's stream act on: group slots, DAG parents).
pub(crate) fn finished_ids(events: &[Event]) -> impl Iterator<Item = String> + '_ {
    events.iter().filter_map(|e| match e.kind {
        EventKind::Completed { .. } | EventKind::Failed { .. } | EventKind::Removed { .. } => {
            e.kind.job_id().map(str::to_owned)
        }
        _ => None,
    })
}

/// The id of the stream's newest entry (`0-0` for an empty stream): where a
/// follower of the events that starts now reads from.
pub(crate) async fn last_entry_id(conn: &Connection, stream: &str) -> Result<String> {
    let v: Value = conn.pool().xrevrange(stream, "+", "-", Some(1)).await?;
    Ok(parse_xrange_first(v).unwrap_or_else(|| "0-0".to_owned()))
}

fn parse_xrange_first(v: Value) -> Option<String> {
    match v {
        Value::Array(mut entries) if !entries.is_empty() => match entries.swap_remove(0) {
            Value::Array(parts) => parts.first().and_then(Value::as_string),
            _ => None,
        },
        _ => None,
    }
}

fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// `[[key, [[id, [f, v, …]], …]]]` (RESP2) into events; nil (timeout) into none.
pub(crate) fn parse_xread(v: Value) -> Vec<Event> {
    let mut out = Vec::new();
    let Value::Array(streams) = v else { return out };
    for s in streams {
        let Value::Array(mut parts) = s else { continue };
        let Some(Value::Array(entries)) = parts.pop() else {
            continue;
        };
        for entry in entries {
            let Value::Array(mut e) = entry else { continue };
            let fields = match e.pop() {
                Some(Value::Array(f)) => f,
                _ => continue,
            };
            let Some(id) = e.first().and_then(Value::as_string) else {
                continue;
            };
            let flat: Vec<String> = fields.iter().filter_map(Value::as_string).collect();
            let pairs = flat
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| (c[0].clone(), c[1].clone()))
                .collect();
            out.push(Event::parse(id, pairs));
        }
    }
    out
}
