--[[
  releaseDagParents (EchoMQ extension, DAG flows, docs/flows.md §DAGs):
  hands a finished DAG node to its EXTRA parents, the dependents BullMQ cannot
  record (a BullMQ job has one `parentKey`; its first dependent is that
  parent and BullMQ's own finish releases it). Each extra parent had the
  node's key put in its `:dependencies` at add time, and the node lists them
  in `{P}<id>:dag:parents`.

  What the node's state does to each extra parent, as BullMQ's finish does to
  the first one:
    completed  SREM from :dependencies, HSET :processed node -> returnvalue,
               released (moveParentToWait: delay, priority) when none is left
    failed     the node's failure rule (its `parent` descriptor: fpof, cpof,
               idof, rdof), as updateParentOnChildFailed applies it; without
               a rule nothing happens, as for the first parent (-1)
    removed    SREM from :dependencies, pushed to wait when none is left, as
               BullMQ's removal detaches a child (removeParentDependencyKey)
    otherwise  nothing (-1): the node has not finished
  Every step acts only when the node was still a pending dependency of that
  parent, so a second call (the worker and a follower, a replayed event)
  changes nothing. At most ARGV[3] parents per call (HRANDFIELD): the caller
  calls again while the reply is above 0.

  KEYS
    1 {P}<id>              the node's hash
    2 {P}<id>:dag:parents  HASH extra parent key -> its queue key (<prefix>:<queue>)
    3 {P}dag:pending       SET of this queue's node ids not yet handed over
    4 {P}completed         5 {P}failed
  ARGV
    1 node id   2 now (ms, the base of a released parent's delay)   3 most parents per call
  Returns
    the number of extra parents left (0: done, the id left dag:pending), or
    -1: not finished (or failed without a rule), nothing changed
  Events: those of each release (waiting or delayed, on the parent's queue).
  The logic is includes/releaseDagParents (releaseDagParents()), so that a
  finish script may hand its finished node over in the same call.
]]
--- @include "includes/releaseDagParents"

return releaseDagParents(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3])
