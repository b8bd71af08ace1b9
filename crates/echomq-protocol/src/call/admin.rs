//! Calls of the producer and admin side of a queue (the `Queue` handle).

use super::decode::{self, Reply};
use super::{Arg, ReplyError, ScriptCall};
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// getStateV2-8: the state of one job, as the state's name
/// (`completed`, `waiting`, `waiting-children`, … or `unknown`).
#[derive(Debug, Clone, Copy)]
pub struct GetState<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
}

impl ScriptCall for GetState<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        ScriptId::GetStateV2
    }

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.completed(),
            k.failed(),
            k.delayed(),
            k.active(),
            k.wait(),
            k.paused(),
            k.waiting_children(),
            k.prioritized(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        decode::text(self.script(), &reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::argv_text;

    #[test]
    fn get_state() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = GetState { keys: &k, id: "7" };
        assert_eq!(argv_text(&call), ["7"]);
        assert_eq!(call.keys()[6], "emq:q:waiting-children");
        assert_eq!(call.decode(Reply::text("active")).unwrap(), "active");
    }
}
