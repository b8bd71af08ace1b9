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
]]
--- @include "includes/updateParentOnChildFinish"
--- @include "includes/pushParentToWait"

local jobKey = KEYS[1]
local parentsKey = KEYS[2]
local jobId = ARGV[1]
local now = ARGV[2]
local budget = tonumber(ARGV[3])
if budget == nil or budget < 1 then
  budget = 1
end

if redis.call("EXISTS", parentsKey) == 0 then
  redis.call("SREM", KEYS[3], jobId)
  return 0
end

local mode, value
local flags = {}
if redis.call("EXISTS", jobKey) == 0 then
  mode = "removed"
elseif redis.call("ZSCORE", KEYS[4], jobId) then
  mode = "completed"
  value = redis.call("HGET", jobKey, "returnvalue") or "null"
elseif redis.call("ZSCORE", KEYS[5], jobId) then
  local fields = redis.call("HMGET", jobKey, "parent", "failedReason")
  if fields[1] then
    local ok, decoded = pcall(cjson.decode, fields[1])
    if ok and type(decoded) == "table" then
      flags = decoded
    end
  end
  if not (flags["fpof"] or flags["cpof"] or flags["idof"] or flags["rdof"]) then
    return -1
  end
  mode = "failed"
  value = fields[2] or ""
else
  return -1
end

local parents = redis.call("HRANDFIELD", parentsKey, budget, "WITHVALUES")
for i = 1, #parents, 2 do
  local parentKey = parents[i]
  local parentPrefix = parents[i + 1] .. ":"
  local parentId = string.sub(parentKey, #parentPrefix + 1)
  if mode == "completed" then
    updateParentOnChildCompleted(parentKey, parentPrefix, parentId, jobKey, value, now)
  elseif mode == "failed" then
    updateParentOnChildFailed(parentKey, parentPrefix, parentId, flags, jobKey, value, now)
  else
    local dependenciesKey = parentKey .. ":dependencies"
    if redis.call("SREM", dependenciesKey, jobKey) == 1 and redis.call("SCARD", dependenciesKey) == 0
        and redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 1 then
      pushParentToWait(parentPrefix, parentId, true)
    end
  end
  redis.call("HDEL", parentsKey, parentKey)
end

local left = redis.call("HLEN", parentsKey)
if left == 0 then
  redis.call("SREM", KEYS[3], jobId)
end
return left
