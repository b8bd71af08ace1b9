//! One add call for a job with or without a group, so a bulk add pipelines
//! both kinds in one round trip.

use echomq_protocol::call::add::AddJob;
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
