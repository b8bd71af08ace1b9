//! The request/reply under every handle method: one timeout, one error type.

use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, Message, RpcReplyPort};

use super::error::HandleError;

/// Asks `actor` and waits up to `timeout` for the reply.
pub(crate) async fn ask<M: Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    operation: &'static str,
    timeout: Duration,
    msg: impl FnOnce(RpcReplyPort<T>) -> M,
) -> Result<T, HandleError> {
    match actor.call(msg, Some(timeout)).await {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => Err(HandleError::Timeout {
            operation,
            after: timeout,
        }),
        Ok(CallResult::SenderError) | Err(_) => Err(HandleError::Stopped { operation }),
    }
}

/// Sends `msg` to `actor` without waiting for anything.
pub(crate) fn tell<M: Message>(
    actor: &ActorRef<M>,
    operation: &'static str,
    msg: M,
) -> Result<(), HandleError> {
    actor
        .cast(msg)
        .map_err(|_| HandleError::Stopped { operation })
}
