//! The restart policy, in one place: how a supervisor classifies the end of
//! one of its children.
//!
//! A child that stopped because it was asked to — a completed `Close`, a set
//! or supervisor that is closing — is an expected stop and is never restarted.
//! Any other end (a panic, a kill, a stop nobody asked for) is restarted while
//! the supervisor's [`RestartIntensity`] allows it; past the budget the
//! supervisor gives up and fails itself with a [`SupervisionError::GaveUp`].

use std::time::Duration;

use ractor::{ActorCell, SpawnErr, SupervisionEvent};

use super::intensity::RestartIntensity;
use super::worker_set::{Member, WorkerSet};

/// Stop reasons the runtime's actors give when they end as asked: the
/// Worker's and QueueEvents' `"closed"`, the LockManager's `"worker closed"`
/// (its Worker closed). [`WorkerSet::close`] and the host supervisor stop the
/// other members with `"closed"` too.
pub(crate) const CLOSED: &str = "closed";
const EXPECTED_REASONS: [&str; 2] = [CLOSED, "worker closed"];

/// What a supervisor should do about one member of a worker set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SupervisionDecision {
    /// The event is not the end of one of this set's members (another
    /// child's, or a start): the set has nothing to say about it.
    NotMine,
    /// The member stopped as asked (a completed Close, or the set is
    /// closing): leave it stopped.
    ExpectedStop(Member),
    /// Restart this member with [`WorkerSetSpec::restart`](super::worker_set::WorkerSetSpec::restart);
    /// the restart has been counted in the budget.
    Restart(Member),
    /// The budget is spent: the supervisor should fail itself (return
    /// [`SupervisionError::GaveUp`]) so that its own supervisor decides.
    GiveUp(Member),
}

/// Which kind of child a supervisor lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChildKind {
    /// A worker set's Worker.
    Worker,
    /// A worker set's LockManager.
    LockManager,
    /// A worker set's StalledChecker.
    StalledChecker,
    /// A JobScheduler.
    JobScheduler,
    /// A QueueEvents.
    QueueEvents,
    /// A GroupFeeder.
    GroupFeeder,
    /// A DagReleaser.
    DagReleaser,
    /// A Relay node.
    Relay,
}

impl From<Member> for ChildKind {
    fn from(m: Member) -> Self {
        match m {
            Member::Worker => ChildKind::Worker,
            Member::LockManager => ChildKind::LockManager,
            Member::StalledChecker => ChildKind::StalledChecker,
        }
    }
}

impl std::fmt::Display for ChildKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Why a supervisor failed itself. It is the error its parent sees in
/// `SupervisionEvent::ActorFailed` (downcast the boxed error to read it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SupervisionError {
    /// The restart budget was spent.
    #[error("{child} ended with more than {max} restarts in {window:?}: giving up")]
    GaveUp {
        /// The child whose end spent the budget.
        child: ChildKind,
        /// The budget's maximum.
        max: usize,
        /// The budget's window.
        window: Duration,
    },
    /// A restart was allowed but the new actor did not start.
    #[error("restarting {child} failed: {source}")]
    RestartFailed {
        /// The child being restarted.
        child: ChildKind,
        /// ractor's error.
        #[source]
        source: SpawnErr,
    },
}

impl SupervisionError {
    /// The give-up error for `child` under `budget`.
    pub fn gave_up(child: impl Into<ChildKind>, budget: &RestartIntensity) -> Self {
        SupervisionError::GaveUp {
            child: child.into(),
            max: budget.max(),
            window: budget.window(),
        }
    }
}

/// The verdict on one child's end, whatever kind of child it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Expected,
    Restart,
    GiveUp,
}

/// The cell whose end `evt` reports, and whether that end was asked for;
/// `None` for events that are not an end (a start, a group change).
pub(crate) fn ended(evt: &SupervisionEvent) -> Option<(&ActorCell, bool)> {
    match evt {
        SupervisionEvent::ActorFailed(cell, _) => Some((cell, false)),
        SupervisionEvent::ActorTerminated(cell, _, reason) => Some((
            cell,
            reason
                .as_deref()
                .is_some_and(|r| EXPECTED_REASONS.contains(&r)),
        )),
        _ => None,
    }
}

/// The policy: an end that was asked for, or any end while closing, is
/// expected; anything else is restarted while the budget allows.
pub(crate) fn verdict(asked: bool, closing: bool, budget: &mut RestartIntensity) -> Verdict {
    if asked || closing {
        Verdict::Expected
    } else if budget.allow() {
        Verdict::Restart
    } else {
        Verdict::GiveUp
    }
}

impl WorkerSet {
    /// Classifies `evt` for this set under the supervisor's `budget` (one
    /// budget per supervisor, shared by all its children). A `Restart` has
    /// already been counted in the budget.
    pub fn classify(
        &self,
        evt: &SupervisionEvent,
        budget: &mut RestartIntensity,
    ) -> SupervisionDecision {
        let Some((cell, asked)) = ended(evt) else {
            return SupervisionDecision::NotMine;
        };
        let Some(member) = self.member_of(cell) else {
            return SupervisionDecision::NotMine;
        };
        match verdict(asked, self.is_closing(), budget) {
            Verdict::Expected => SupervisionDecision::ExpectedStop(member),
            Verdict::Restart => SupervisionDecision::Restart(member),
            Verdict::GiveUp => SupervisionDecision::GiveUp(member),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_or_closing_is_expected_and_spends_nothing() {
        let mut b = RestartIntensity::new(1, Duration::from_secs(60));
        assert_eq!(verdict(true, false, &mut b), Verdict::Expected);
        assert_eq!(verdict(false, true, &mut b), Verdict::Expected);
        assert_eq!(verdict(false, false, &mut b), Verdict::Restart);
        assert_eq!(verdict(false, false, &mut b), Verdict::GiveUp);
    }

    #[test]
    fn the_give_up_error_names_the_budget() {
        let b = RestartIntensity::new(3, Duration::from_secs(5));
        let e = SupervisionError::gave_up(Member::Worker, &b);
        assert_eq!(
            e.to_string(),
            "Worker ended with more than 3 restarts in 5s: giving up"
        );
    }
}
