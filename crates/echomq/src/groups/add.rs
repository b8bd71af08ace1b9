//! One add call for a job with or without a group, so a bulk add pipelines
//! both kinds in one round trip.

use echomq_protocol::call::add::AddJob;
use echomq_protocol::call::add_group::{AddAnswer, AddStandardJobs};
use echomq_protocol::call::groups::{AddGroupJob, GroupAdded};
use echomq_protocol::call::{Arg, Reply, ReplyError, ScriptCall};
use echomq_protocol::keys::Key;
use echomq_protocol::ScriptId;

/// A plain add (BullMQ's scripts) or a group add (the extension's).
#[derive(Debug, Clone)]
pub(crate) enum AnyAdd<'a> {
    /// addStandardJob / addDelayedJob / addPrioritizedJob.
    Plain(AddJob<'a>),
    /// addGroupJob.
    Group(AddGroupJob<'a>),
}

impl ScriptCall for AnyAdd<'_> {
    type Output = GroupAdded;

    fn script(&self) -> ScriptId {
        match self {
            AnyAdd::Plain(c) => c.script(),
            AnyAdd::Group(c) => c.script(),
        }
    }

    fn keys(&self) -> Vec<Key> {
        match self {
            AnyAdd::Plain(c) => c.keys(),
            AnyAdd::Group(c) => c.keys(),
        }
    }

    fn args(&self) -> Vec<Arg> {
        match self {
            AnyAdd::Plain(c) => c.args(),
            AnyAdd::Group(c) => c.args(),
        }
    }

    fn decode(&self, reply: Reply) -> Result<GroupAdded, ReplyError> {
        match self {
            AnyAdd::Plain(c) => c.decode(reply).map(GroupAdded::Added),
            AnyAdd::Group(c) => c.decode(reply),
        }
    }
}

/// One call of a pipelined `add_bulk` chunk: a lone add, or a run of
/// standard adds in one addStandardJobs call (issue 42).
pub(crate) enum BulkAdd<'a> {
    /// One add, its own call.
    One(AnyAdd<'a>),
    /// Consecutive standard adds, one call.
    Many(AddStandardJobs<'a>),
}

/// What one entry of a [`BulkAdd::Many`] answered.
pub(crate) type EntryAnswer = std::result::Result<GroupAdded, EntryRefusal>;

/// Why one entry of a group was not added.
pub(crate) enum EntryRefusal {
    /// The script's code (or an answer of another shape).
    Reply(ReplyError),
    /// Redis refused one of its commands (the message).
    Redis(String),
}

impl ScriptCall for BulkAdd<'_> {
    type Output = Vec<EntryAnswer>;

    fn script(&self) -> ScriptId {
        match self {
            BulkAdd::One(c) => c.script(),
            BulkAdd::Many(c) => c.script(),
        }
    }

    fn keys(&self) -> Vec<Key> {
        match self {
            BulkAdd::One(c) => c.keys(),
            BulkAdd::Many(c) => c.keys(),
        }
    }

    fn args(&self) -> Vec<Arg> {
        match self {
            BulkAdd::One(c) => c.args(),
            BulkAdd::Many(c) => c.args(),
        }
    }

    fn decode(&self, reply: Reply) -> Result<Vec<EntryAnswer>, ReplyError> {
        match self {
            // A lone add's code stays the call's error, as `add_bulk` always
            // reported it.
            BulkAdd::One(c) => Ok(vec![Ok(c.decode(reply)?)]),
            BulkAdd::Many(c) => Ok(c
                .decode(reply)?
                .into_iter()
                .map(|a| match a {
                    AddAnswer::Script(Ok(id)) => Ok(GroupAdded::Added(id)),
                    AddAnswer::Script(Err(e)) => Err(EntryRefusal::Reply(e)),
                    AddAnswer::Refused(message) => Err(EntryRefusal::Redis(message)),
                })
                .collect()),
        }
    }
}
