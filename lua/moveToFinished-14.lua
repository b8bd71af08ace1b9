--[[
  moveToFinished: complete or finally fail an active job, apply retention
  and optionally take the next job in the same call (docs/protocol.md §Scripts).

  KEYS
    1 {P}wait     2 {P}active    3 {P}prioritized  4 {P}events
    5 {P}stalled  6 {P}limiter   7 {P}delayed      8 {P}paused (unused)
    9 {P}meta     10 {P}pc
    11 target set {P}completed | {P}failed
    12 job key {P}<id>
    13 metrics key {P}metrics:completed | {P}metrics:failed
    14 {P}marker
  ARGV
    1 job id
    2 now (ms): finishedOn and the target-set score
    3 field: returnvalue | failedReason
    4 value: return value JSON | raw failure message
    5 target: completed | failed
    6 fetch next: 1 | 0
    7 {P}
    8 FinishOpts (msgpack map: token, name, keepJobs, limiter, lockDuration,
      attempts, maxMetricsSize, ...)
    9 FieldsToUpdate (msgpack) or ""
  Returns
    0, a next-job reply (see moveToActive), or -1 -2 -3 -4 -6 -9.
  Events: completed | failed (+ retries-exhausted), drained, and those of
  fetch-next, flows and dedup requeue.
]]
--- @include "includes/collectMetrics"
--- @include "includes/fetchNextJob"
--- @include "includes/finishDeduplication"
--- @include "includes/moveParentToWait"
--- @include "includes/removeJobKeys"
--- @include "includes/removeJobsByRetention"
--- @include "includes/removeLock"
--- @include "includes/removeParentDependencyKey"
--- @include "includes/trimEvents"
--- @include "includes/updateJobFields"
--- @include "includes/updateParentOnChildFinish"

local jobKey = KEYS[12]
local jobId = ARGV[1]
local timestamp = ARGV[2]
local field = ARGV[3]
local value = ARGV[4]
local target = ARGV[5]
local prefix = ARGV[7]

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end

-- A parent may only complete once every child is done and none failed it.
if target == "completed" then
  if redis.call("SCARD", jobKey .. ":dependencies") ~= 0 then
    return -4
  end
  if redis.call("ZCARD", jobKey .. ":unsuccessful") ~= 0 then
    return -9
  end
end

local opts = cmsgpack.unpack(ARGV[8])

local lockResult = removeLock(jobKey, KEYS[5], opts["token"], jobId)
if lockResult < 0 then
  return lockResult
end

updateJobFields(jobKey, ARGV[9])

local attributes = redis.call("HMGET", jobKey, "parentKey", "parent", "deid")
local parentKey = attributes[1] or nil
local parent = nil
if attributes[2] then
  parent = cjson.decode(attributes[2])
end
local deduplicationId = attributes[3] or nil

local parentPrefix, parentId
if parentKey ~= nil or type(parent) == "table" then
  if parentKey == nil then
    parentKey = parent["queueKey"] .. ":" .. parent["id"]
  end
  parentPrefix, parentId = getParentPrefixAndId(parentKey, parent)
end

-- Removing the tail-most occurrence matches where a fresh take lands last.
if redis.call("LREM", KEYS[2], -1, jobId) == 0 then
  return -3
end

trimEvents(KEYS[9], KEYS[4])
local maxEvents = getOrSetMaxEvents(KEYS[9])

if deduplicationId ~= nil then
  local deduplicationKey = prefix .. "de:" .. deduplicationId
  removeDeduplicationKeyOnFinish(deduplicationKey, jobId)
  requeueDeduplicatedNextJob(prefix, deduplicationId, deduplicationKey, timestamp, maxEvents)
end

if parentKey ~= nil then
  if target == "completed" then
    updateParentOnChildCompleted(parentKey, parentPrefix, parentId, jobKey, value, timestamp)
  else
    updateParentOnChildFailed(parentKey, parentPrefix, parentId, parent, jobKey, value, timestamp)
  end
end

local attemptsMade = redis.call("HINCRBY", jobKey, "atm", 1)

local keepJobs = opts["keepJobs"] or {}
local maxCount = tonumber(keepJobs["count"])
if maxCount == 0 then
  removeJobKeys(jobKey)
  if parentKey ~= nil then
    removeParentDependencyKey(jobKey, false, parentKey, prefix)
  end
else
  redis.call("ZADD", KEYS[11], timestamp, jobId)
  redis.call("HSET", jobKey, field, value, "finishedOn", timestamp)
  if target == "failed" then
    -- The deferred failure has now happened.
    redis.call("HDEL", jobKey, "defa")
  end
  if keepJobs["age"] ~= nil then
    removeJobsByMaxAge(timestamp, keepJobs["age"], KEYS[11], prefix, keepJobs["limit"])
  end
  if maxCount ~= nil and maxCount > 0 then
    removeJobsByMaxCount(maxCount, KEYS[11], prefix)
  end
end

redis.call("XADD", KEYS[4], "*", "event", target, "jobId", jobId, field, value, "prev", "active")

if target == "failed" then
  if attemptsMade >= (tonumber(opts["attempts"]) or 0) then
    redis.call("XADD", KEYS[4], "*", "event", "retries-exhausted", "jobId", jobId, "attemptsMade", attemptsMade)
  end
end

local maxMetricsSize = opts["maxMetricsSize"]
if maxMetricsSize ~= nil and maxMetricsSize ~= "" then
  collectMetrics(KEYS[13], KEYS[13] .. ":data", maxMetricsSize, timestamp)
end

if ARGV[6] == "1" then
  local reply = fetchNextJob(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[9], KEYS[10], KEYS[14],
    prefix, timestamp, opts, false)
  if reply ~= nil then
    return reply
  end
end

if redis.call("LLEN", KEYS[1]) == 0 and redis.call("LLEN", KEYS[2]) == 0 and redis.call("ZCARD", KEYS[3]) == 0 then
  redis.call("XADD", KEYS[4], "*", "event", "drained")
end

return 0
