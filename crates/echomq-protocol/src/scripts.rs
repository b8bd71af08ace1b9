//! The L2 script catalogue: every Lua script EchoMQ calls, with its KEYS count,
//! its expanded source (the `--- @include` directives resolved at build time)
//! and the SHA1 it is called by.

include!(concat!(env!("OUT_DIR"), "/scripts_generated.rs"));

/// A script as compiled into the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptDef {
    /// The script id.
    pub id: ScriptId,
    /// Expanded Lua source: the exact bytes hashed and sent to Redis.
    pub source: &'static str,
    /// Lowercase hex SHA1 of `source`.
    pub sha1: &'static str,
}

macro_rules! script_ids {
    ($($(#[$doc:meta])* $variant:ident => $file:literal, $keys:literal;)*) => {
        /// Every script of the catalogue. The file name is `<name>-<KEYS>.lua`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum ScriptId { $($(#[$doc])* $variant,)* }

        impl ScriptId {
            /// All scripts, in catalogue order.
            pub const ALL: &'static [ScriptId] = &[$(ScriptId::$variant,)*];

            /// The BullMQ name (`moveToActive`).
            pub fn name(self) -> &'static str {
                match self { $(ScriptId::$variant => $file,)* }
            }

            /// How many KEYS it takes (the file name suffix).
            pub fn num_keys(self) -> usize {
                match self { $(ScriptId::$variant => $keys,)* }
            }
        }
    };
}

script_ids! {
    /// Add a ready job with priority 0.
    AddStandardJob => "addStandardJob", 9;
    /// Add a delayed job.
    AddDelayedJob => "addDelayedJob", 6;
    /// Add a prioritized job.
    AddPrioritizedJob => "addPrioritizedJob", 9;
    /// Take the next job and lock it.
    MoveToActive => "moveToActive", 11;
    /// Complete or finally fail a job, optionally fetching the next.
    MoveToFinished => "moveToFinished", 14;
    /// Move an active job to delayed (retry with backoff, or on request).
    MoveToDelayed => "moveToDelayed", 11;
    /// Move an active job straight back to wait.
    RetryJob => "retryJob", 11;
    /// Renew one lock.
    ExtendLock => "extendLock", 2;
    /// Renew many locks in one call.
    ExtendLocks => "extendLocks", 1;
    /// Release a lock held with a token.
    ReleaseLock => "releaseLock", 1;
    /// The two-phase stalled check (docs/decisions.md §1 Script names: eight KEYS).
    MoveStalledJobsToWait => "moveStalledJobsToWait", 8;
    /// Put an active job back in front of the queue.
    MoveJobFromActiveToWait => "moveJobFromActiveToWait", 9;
    /// Store progress and emit `progress`.
    UpdateProgress => "updateProgress", 3;
    /// Replace a job's data.
    UpdateData => "updateData", 1;
    /// Append a log line.
    AddLog => "addLog", 2;
    /// Counts by state.
    GetCounts => "getCounts", 1;
    /// The state of one job.
    GetStateV2 => "getStateV2", 8;
    /// EchoMQ extension: the state of one job without walking a long list.
    GetStateBounded => "getStateBounded", 8;
    /// Whether a job finished, and how.
    IsFinished => "isFinished", 3;
    /// Pause or resume the queue.
    Pause => "pause", 7;
    /// Remove waiting (and delayed) jobs.
    Drain => "drain", 5;
    /// EchoMQ extension: one bounded step of a drain.
    DrainChunk => "drainChunk", 2;
    /// Destroy a paused queue in chunks.
    Obliterate => "obliterate", 2;
    /// Remove one job (and its children).
    RemoveJob => "removeJob", 2;
    /// Move one delayed job to wait now.
    Promote => "promote", 9;
    /// Move failed, completed or delayed jobs to wait in bulk (retryJobs, promoteJobs).
    MoveJobsToWait => "moveJobsToWait", 8;
    /// Re-queue a completed or failed job.
    ReprocessJob => "reprocessJob", 9;
    /// Delete old jobs of one state.
    CleanJobsInSet => "cleanJobsInSet", 3;
    /// Ids by state, paginated.
    GetRanges => "getRanges", 1;
    /// Change the delay of a delayed job.
    ChangeDelay => "changeDelay", 4;
    /// Change the priority of a job.
    ChangePriority => "changePriority", 7;
    /// Create or replace a job scheduler and its pending iteration.
    AddJobScheduler => "addJobScheduler", 11;
    /// Create the iteration after the one a worker has just taken.
    UpdateJobScheduler => "updateJobScheduler", 12;
    /// Delete a job scheduler and its delayed iteration.
    RemoveJobScheduler => "removeJobScheduler", 3;
    /// One job scheduler's definition and current millis.
    GetJobScheduler => "getJobScheduler", 1;
    /// EchoMQ extension: the audit's O(1) facts of a queue.
    AuditHead => "auditHead", 1;
    /// EchoMQ extension: one page of one state structure for the audit.
    AuditPage => "auditPage", 1;
    /// EchoMQ extension: one SCAN step of the audit over a queue's keys.
    AuditKeys => "auditKeys", 1;
    /// Free a deduplication id if the given job still owns it.
    RemoveDeduplicationKey => "removeDeduplicationKey", 1;
    /// Time left in the rate limiter's window once its budget is used up.
    GetRateLimitTtl => "getRateLimitTtl", 2;
    /// Whether the queue's global concurrency is used up.
    IsMaxed => "isMaxed", 2;
    /// Ready jobs per priority.
    GetCountsPerPriority => "getCountsPerPriority", 2;
    /// Jobs (id and hash) by state, paginated, skipping vanished ids.
    GetJobs => "getJobs", 1;
    /// EchoMQ extension: one page of a state scan filtered on the server by
    /// job name and data text.
    SearchJobs => "searchJobs", 1;
    /// Add a flow parent, parked in waiting-children.
    AddParentJob => "addParentJob", 6;
    /// The last step of a flow insert: release a parent left without pending children.
    ReleaseParentIfNoPendingDependencies => "releaseParentIfNoPendingDependencies", 2;
    /// Park an active parent until its children finish.
    MoveToWaitingChildren => "moveToWaitingChildren", 7;
    /// Children counts of a parent by group.
    GetDependencyCounts => "getDependencyCounts", 4;
    /// One page of a set or hash (a parent's children).
    Paginate => "paginate", 1;
    /// Detach a child from its parent.
    RemoveChildDependency => "removeChildDependency", 1;
    /// Remove the unprocessed children of a parent.
    RemoveUnprocessedChildren => "removeUnprocessedChildren", 2;
    /// Read a metrics series.
    GetMetrics => "getMetrics", 2;
    /// EchoMQ extension: the audit's read-only check of flow parents.
    AuditFlows => "auditFlows", 1;
    /// Relay: register (or refresh) a node, its lease and its info.
    RelayRegisterNode => "relayRegisterNode", 1;
    /// Relay: renew a node's lease.
    RelayHeartbeat => "relayHeartbeat", 1;
    /// Relay: a node leaving cleanly.
    RelayUnregisterNode => "relayUnregisterNode", 1;
    /// Relay: drop expired nodes and retained messages, prune their subscriptions.
    RelaySweep => "relaySweep", 1;
    /// Relay: subscribe an endpoint to a pattern (with the retained message).
    RelaySubscribe => "relaySubscribe", 1;
    /// Relay: every subscription of one endpoint.
    RelayRemoveEndpoint => "relayRemoveEndpoint", 1;
    /// Relay: publish on a topic, optionally retained.
    RelayPublish => "relayPublish", 1;
    /// Relay: forget a topic's retained message.
    RelayDeleteRetained => "relayDeleteRetained", 1;
    /// Relay: the next batch of a node's inbox, marked in flight.
    RelayReadInbox => "relayReadInbox", 1;
    /// Relay: how far a node consumed its inbox.
    RelayAckInbox => "relayAckInbox", 1;
    /// Relay: trim a node's inbox, record backlog and drops.
    RelayTrimInbox => "relayTrimInbox", 1;
    /// Relay: the dashboard views of a namespace.
    RelayGet => "relayGet", 1;
    /// Relay: the namespaces of a prefix that may be in use.
    RelayGetNamespaces => "relayGetNamespaces", 1;
    /// Relay: note a namespace in use in the prefix's registry.
    RelayTouchNamespace => "relayTouchNamespace", 1;
    /// Groups (EchoMQ extension): add a job to its group's set.
    AddGroupJob => "addGroupJob", 10;
    /// Groups: the feeder's release of a batch of group jobs into wait.
    ReleaseGroupJobs => "releaseGroupJobs", 10;
    /// Groups: free the slots of released jobs that have finished.
    AccountGroupJobs => "accountGroupJobs", 3;
    /// Groups: change a group's settings, pause or resume it.
    GroupSettings => "groupSettings", 6;
    /// Groups: one group's or a page of groups' counts and settings.
    GetGroups => "getGroups", 1;
    /// Groups: remove a group's unreleased jobs, then the group.
    RemoveGroup => "removeGroup", 7;
    /// Groups: the audit's read-only view of the group structures.
    AuditGroups => "auditGroups", 2;
    /// Groups: read or replace the queue's defaults for groups without settings.
    GroupDefaults => "groupDefaults", 1;
    /// EchoMQ extension (`echomq adopt`): turn one legacy repeatable job of
    /// BullMQ <= 4 into a job scheduler.
    AdoptLegacyRepeatable => "adoptLegacyRepeatable", 5;
    /// EchoMQ extension (group commit): several moveToFinished in one call,
    /// each with its own effects and reply.
    MoveJobsToFinished => "moveJobsToFinished", 15;
    /// EchoMQ extension (fetch in batches): several moveToActive in one
    /// call, each take with its own token, lock and event.
    MoveJobsToActive => "moveJobsToActive", 11;
    /// EchoMQ extension (adds in groups): several addStandardJob in one
    /// call, each with its own effects and reply.
    AddStandardJobs => "addStandardJobs", 9;
    /// EchoMQ extension (dead letters): a final failure that moves the job
    /// to the dead-letter queue in the same call.
    MoveToDeadLetter => "moveToDeadLetter", 18;
    /// EchoMQ extension (dead letters): a job already in `failed` to the
    /// dead-letter queue (the follower of other workers' failures).
    DeadLetterFailed => "deadLetterFailed", 5;
    /// EchoMQ extension (dead letters): one dead letter back to its queue.
    ReplayDeadLetter => "replayDeadLetter", 9;
    /// EchoMQ extension (DAG flows): hand a finished node to its extra
    /// parents, the dependents BullMQ's `parentKey` cannot name.
    ReleaseDagParents => "releaseDagParents", 5;
    /// EchoMQ extension (DAG flows): the audit's read-only page of a queue's
    /// DAG nodes not handed over yet.
    AuditDag => "auditDag", 1;
    /// EchoMQ extension (byte budgets): one bounded step of a queue's byte
    /// budget — estimate what it keeps, trim events, remove the oldest
    /// finished jobs.
    EnforceBudget => "enforceBudget", 4;
    /// EchoMQ extension (payload offload): a page of offloaded payloads no
    /// job uses any more, for the caller to delete from the blob store.
    CollectBlobs => "collectBlobs", 2;
    /// EchoMQ extension (DAG flows): one node's extra edges (and its entry
    /// in a gated write), checked whole before any write.
    AddDagEdges => "addDagEdges", 4;
    /// EchoMQ extension (DAG flows): the writer's side of a gated write's
    /// gate (open, renew, lifting, close), on Redis's clock.
    DagGate => "dagGate", 2;
    /// EchoMQ extension (DAG flows): roll back or finish a gated write whose
    /// writer let its deadline pass, a page of nodes per call.
    RepairDagWrite => "repairDagWrite", 2;
}

impl ScriptId {
    /// Whether a call may change the queue. A read-only script is safe to
    /// send again whatever happened to its first attempt; a write whose reply
    /// was lost may or may not have run (the runtime's "outcome unknown").
    /// `getCounts`, `getRanges` and `getJobs` count as reads: the one thing
    /// they may write is dropping a legacy `0:` marker, which changes no job.
    pub fn writes(self) -> bool {
        use ScriptId::*;
        !matches!(
            self,
            GetCounts
                | GetStateV2
                | GetStateBounded
                | IsFinished
                | GetRanges
                | GetJobScheduler
                | AuditHead
                | AuditPage
                | AuditKeys
                | GetRateLimitTtl
                | IsMaxed
                | GetCountsPerPriority
                | GetJobs
                | SearchJobs
                | GetDependencyCounts
                | Paginate
                | GetMetrics
                | AuditFlows
                | AuditDag
                | RelayGet
                | RelayGetNamespaces
        )
    }

    /// The file name in `lua/`.
    pub fn file_name(self) -> String {
        format!("{}-{}.lua", self.name(), self.num_keys())
    }

    /// The compiled script, or `None` when `lua/` did not hold its file at build time.
    ///
    /// Every script call asks for its definition, so the catalogue is looked
    /// up once per process and then indexed by the id.
    pub fn def(self) -> Option<ScriptDef> {
        static DEFS: std::sync::OnceLock<Vec<Option<ScriptDef>>> = std::sync::OnceLock::new();
        let defs = DEFS.get_or_init(|| ScriptId::ALL.iter().map(|id| id.find_def()).collect());
        match defs.get(self as usize) {
            Some(def @ Some(d)) if d.id == self => *def,
            // ALL lists the ids in declaration order; a mismatch would only
            // cost the slow path.
            _ => self.find_def(),
        }
    }

    fn find_def(self) -> Option<ScriptDef> {
        let stem = format!("{}-{}", self.name(), self.num_keys());
        GENERATED
            .iter()
            .find(|(s, _, _)| *s == stem)
            .map(|(_, source, sha1)| ScriptDef {
                id: self,
                source,
                sha1,
            })
    }
}

/// Every expanded script file found in `lua/` at build time: (file stem, source, sha1).
/// Includes scripts not (yet) in [`ScriptId`], so the freeze check covers them too.
pub fn compiled() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    GENERATED.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogued_script_is_compiled() {
        let missing: Vec<String> = ScriptId::ALL
            .iter()
            .filter(|id| id.def().is_none())
            .map(|id| id.file_name())
            .collect();
        assert!(missing.is_empty(), "scripts missing from lua/: {missing:?}");
    }

    #[test]
    fn expanded_sources_have_no_directives_left() {
        for (stem, source, _) in compiled() {
            assert!(
                !source.contains("--- @include"),
                "{stem} still has an include directive"
            );
        }
    }
}
