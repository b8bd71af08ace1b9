//! Calls a cluster refused without running them, and how long to keep
//! resending them.
//!
//! While a slot moves (resharding) or loses its primary (failover), Redis
//! refuses a command for that slot *before* running it:
//!
//! * `MOVED`: the slot has a new owner. fred refreshes its slot map first
//!   (`CLUSTER SLOTS`) and then hands the command back, because every client
//!   is built with `max_redirections = 0` (see [`configure`]); the resend goes
//!   to the new owner.
//! * `ASK`: the slot is being migrated and the keys are not (or no longer) on
//!   the old owner. The call is resent to the owner until the migration ends
//!   rather than followed with `ASKING`: a script usually names a key that
//!   does not exist yet (a new job, a lock), and the importing node answers
//!   such a call with `TRYAGAIN` anyway.
//! * `TRYAGAIN`: a multi-key call whose keys are split between the two nodes
//!   of a migration.
//! * `CLUSTERDOWN`: the slot has no reachable primary (a failover under way).
//!
//! None of these ran anything, so a resend never applies a call twice.

use std::time::Duration;

/// How long a refused call is resent before its error is returned: covers a
/// slot migration of a busy queue (its keys move in a few seconds) and a
/// failover (the node timeout plus the election).
pub(crate) const BUDGET: Duration = Duration::from_secs(20);

/// The pause before resend number `round` (1-based): 50 ms doubling to 1 s.
pub(crate) fn pause(round: u32) -> Duration {
    Duration::from_millis((25u64 << round.clamp(1, 6)).min(1000))
}

/// True when Redis refused `e`'s command without running it because of the
/// cluster's slot map (see the module comment).
pub(crate) fn refused_by_cluster(e: &fred::error::Error) -> bool {
    let d = e.details();
    // fred's own words after a MOVED (slot map refreshed) or an ASK that it
    // did not follow: the redirection budget of every command is 0.
    let handed_back = matches!(e.kind(), fred::error::ErrorKind::Routing)
        && d.starts_with("Too many redirections");
    // fred's "Too many failed write attempts" is *not* one of them: a
    // command in flight on a connection that broke can end with it after it
    // ran (docs/decisions.md §9 No replay after a reconnect).
    handed_back
        || d.starts_with("TRYAGAIN")
        || d.starts_with("CLUSTERDOWN")
        || d.starts_with("MOVED")
        || d.starts_with("ASK ")
}

/// fred's handling of redirections, set on every client this crate builds.
///
/// fred follows an `ASK` by writing `ASKING` and reading the next frame
/// itself, out of band: on a pipelined connection that frame is the reply to
/// another command in flight, and when the redirected command has no write
/// attempt left (the no-replay setting, docs/decisions.md §9) the router task
/// of the client ends with that error. Every later command on the client then
/// waits for a router that is gone and times out: what a live resharding of
/// a busy queue's slot did before. With no redirection to follow, fred still
/// refreshes its slot map on `MOVED` and returns the command's error, and
/// [`refused_by_cluster`] resends it.
pub(crate) fn configure(c: &mut fred::types::config::ConnectionConfig) {
    c.max_redirections = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error, ErrorKind};

    #[test]
    fn the_pause_grows_to_a_second() {
        let ms: Vec<u128> = (1..=8).map(|r| pause(r).as_millis()).collect();
        assert_eq!(ms, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(pause(0).as_millis(), 50);
        assert_eq!(pause(u32::MAX).as_millis(), 1000);
    }

    #[test]
    fn only_refusals_that_ran_nothing_are_resent() {
        let yes = [
            Error::new(ErrorKind::Routing, "Too many redirections."),
            Error::new(
                ErrorKind::Unknown,
                "TRYAGAIN Multiple keys request during rehashing of slot",
            ),
            Error::new(ErrorKind::Cluster, "CLUSTERDOWN Hash slot not served"),
            Error::new(ErrorKind::Cluster, "MOVED 3999 127.0.0.1:6381"),
            Error::new(ErrorKind::Cluster, "ASK 3999 127.0.0.1:6381"),
        ];
        for e in &yes {
            assert!(refused_by_cluster(e), "{e:?}");
        }
        let no = [
            Error::new(ErrorKind::IO, "Connection Closed"),
            Error::new(ErrorKind::Unknown, "Too many failed write attempts."),
            Error::new(ErrorKind::Timeout, "Request timed out."),
            Error::new(ErrorKind::Unknown, "ERR Error running script"),
            Error::new(ErrorKind::Unknown, "NOSCRIPT No matching script"),
            Error::new(ErrorKind::Routing, "Failed to route command."),
        ];
        for e in &no {
            assert!(!refused_by_cluster(e), "{e:?}");
        }
    }
}
