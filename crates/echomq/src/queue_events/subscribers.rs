//! The subscribers of a QueueEvents, held outside the actor so that they
//! survive its restart.
//!
//! A host keeps the registry in the actor's arguments ([`QueueEventsArgs`]
//! clones share it). A restarted QueueEvents, spawned from the same
//! arguments, re-attaches the registry: every subscription goes on receiving,
//! in order, from the entry after the last one it delivered — the registry
//! keeps that cursor too. Hosts never re-subscribe by hand.
//!
//! [`QueueEventsArgs`]: super::actor::QueueEventsArgs

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use echomq_protocol::Event;
use ractor::{ActorId, ActorRef};
use tokio::sync::mpsc;

use super::delivery::{actor_subscriber, Delivery, Subscription};

/// A callback subscriber: `false` drops it (its receiver is gone).
pub(crate) type SinkFn = Box<dyn Fn(Delivery) -> bool + Send + Sync>;

enum Sink {
    Channel {
        tx: mpsc::Sender<Delivery>,
        missed: u64,
    },
    Callback(SinkFn),
}

#[derive(Default)]
struct Registry {
    sinks: HashMap<u64, Sink>,
    next_id: u64,
    /// The id of the last entry delivered: where a restarted actor resumes.
    last_id: Option<String>,
    /// The actor delivering to this registry; a superseded one is ignored.
    owner: Option<ActorId>,
}

/// The subscriber registry of one QueueEvents (and of its restarts). Cheap to
/// clone; clones are the same registry. Give each QueueEvents its own: two
/// running actors on one registry would take it from each other.
#[derive(Clone, Default)]
pub struct Subscribers {
    inner: Arc<Mutex<Registry>>,
}

impl std::fmt::Debug for Subscribers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.lock();
        f.debug_struct("Subscribers")
            .field("subscribers", &r.sinks.len())
            .field("last_id", &r.last_id)
            .finish()
    }
}

impl Subscribers {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Nothing in the registry can be left half-updated by a panic (each
        // update is one insert, remove or assignment): a poisoned lock is safe.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, sink: Sink) -> u64 {
        let mut r = self.lock();
        r.next_id += 1;
        let id = r.next_id;
        r.sinks.insert(id, sink);
        id
    }

    /// A bounded subscription of `capacity` deliveries (at least 1). It ends
    /// (`recv` gives `None`) when the QueueEvents is closed, when it is
    /// unsubscribed, or when the registry is dropped.
    pub fn subscribe(&self, capacity: usize) -> Subscription {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let id = self.insert(Sink::Channel { tx, missed: 0 });
        Subscription { id, rx }
    }

    /// A callback subscriber: `f` gets every delivery, in order, on the
    /// QueueEvents actor's task, and returns `false` to be dropped. It must
    /// not block nor call back into this registry.
    pub fn subscribe_with(&self, f: impl Fn(Delivery) -> bool + Send + Sync + 'static) -> u64 {
        self.insert(Sink::Callback(Box::new(f)))
    }

    /// A host actor as subscriber: `convert` maps a delivery to the actor's
    /// message (or `None` to skip it); a stopped actor is dropped.
    pub fn subscribe_actor<M: ractor::Message>(
        &self,
        actor: ActorRef<M>,
        convert: impl Fn(Delivery) -> Option<M> + Send + Sync + 'static,
    ) -> u64 {
        self.insert(Sink::Callback(actor_subscriber(actor, convert)))
    }

    pub(crate) fn subscribe_boxed(&self, f: SinkFn) -> u64 {
        self.insert(Sink::Callback(f))
    }

    /// Drops a subscription.
    pub fn unsubscribe(&self, id: u64) {
        self.lock().sinks.remove(&id);
    }

    /// How many subscribers there are.
    pub fn len(&self) -> usize {
        self.lock().sinks.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of the last entry delivered to these subscribers: the cursor a
    /// restarted QueueEvents resumes after.
    pub fn last_id(&self) -> Option<String> {
        self.lock().last_id.clone()
    }

    /// Makes `owner` the actor that delivers from now on; returns the cursor
    /// to resume after, if anything was delivered before.
    pub(crate) fn attach(&self, owner: ActorId) -> Option<String> {
        let mut r = self.lock();
        r.owner = Some(owner);
        r.last_id.clone()
    }

    /// Delivers a batch from `owner` (ignored from a superseded actor): the
    /// gap first, then each event, moving the cursor with each. Answers how
    /// many deliveries full subscribers missed (told later as `Lagged`).
    pub(crate) fn deliver(&self, owner: ActorId, gap: Option<Delivery>, events: Vec<Event>) -> u64 {
        let mut r = self.lock();
        if r.owner != Some(owner) {
            return 0;
        }
        let mut missed = 0;
        if let Some(g) = gap {
            missed += r.fan_out(&g);
        }
        for e in events {
            r.last_id = Some(e.id.clone());
            missed += r.fan_out(&Delivery::Event(e));
        }
        missed
    }

    /// A clean close by `owner`: every subscription ends.
    pub(crate) fn close(&self, owner: ActorId) {
        let mut r = self.lock();
        if r.owner == Some(owner) {
            r.sinks.clear();
            r.owner = None;
        }
    }
}

impl Registry {
    /// Answers how many subscribers were full and missed `d`.
    fn fan_out(&mut self, d: &Delivery) -> u64 {
        let mut missed_now = 0;
        self.sinks.retain(|_, sink| match sink {
            Sink::Callback(f) => f(d.clone()),
            Sink::Channel { tx, missed } => {
                // A lagging subscriber hears how much it missed before it
                // hears anything new.
                if *missed > 0 {
                    match tx.try_send(Delivery::Lagged(*missed)) {
                        Ok(()) => *missed = 0,
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            *missed += 1;
                            missed_now += 1;
                            return true;
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return false,
                    }
                }
                match tx.try_send(d.clone()) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        *missed += 1;
                        missed_now += 1;
                        true
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                }
            }
        });
        missed_now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> Event {
        Event::parse(id.to_owned(), vec![("event".into(), "drained".into())])
    }

    #[test]
    fn only_the_owner_delivers_and_the_cursor_follows_events() {
        // ActorIds are only made by ractor; a local id is constructible.
        let a = ActorId::Local(1);
        let b = ActorId::Local(2);
        let subs = Subscribers::new();
        let mut s = subs.subscribe(4);
        assert_eq!(subs.attach(a), None);
        subs.deliver(a, None, vec![event("1-0")]);
        assert_eq!(subs.attach(b).as_deref(), Some("1-0"));
        subs.deliver(a, None, vec![event("2-0")]); // superseded: ignored
        subs.deliver(b, None, vec![event("3-0")]);
        let ids: Vec<String> = std::iter::from_fn(|| s.rx.try_recv().ok())
            .map(|d| match d {
                Delivery::Event(e) => e.id,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ids, ["1-0", "3-0"]);
        subs.close(b);
        assert!(subs.is_empty());
        assert!(s.rx.try_recv().is_err());
    }

    #[test]
    fn a_full_subscriber_is_told_how_much_it_missed() {
        let a = ActorId::Local(1);
        let subs = Subscribers::new();
        let mut s = subs.subscribe(1);
        subs.attach(a);
        subs.deliver(a, None, vec![event("1-0"), event("2-0"), event("3-0")]);
        assert!(matches!(s.rx.try_recv(), Ok(Delivery::Event(_))));
        subs.deliver(a, None, vec![event("4-0")]);
        assert_eq!(s.rx.try_recv().ok(), Some(Delivery::Lagged(2)));
    }
}
