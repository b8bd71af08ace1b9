--[[
  retryJob: move an active job straight back to waiting, for a retry
  without backoff (docs/protocol.md §Scripts).

  KEYS
    1 {P}active   2 {P}wait      3 {P}paused (unused)  4 job key {P}<id>
    5 {P}meta     6 {P}events    7 {P}delayed          8 {P}prioritized
    9 {P}pc       10 {P}marker   11 {P}stalled
  ARGV
    1 {P}
    2 now (ms)
    3 push command for priority-0 jobs: LPUSH | RPUSH (lifo)
    4 job id
    5 lock token
    6 FieldsToUpdate (msgpack) or ""
  Returns
    0, or -1 -2 -3 -6.
  Events: waiting {prev delayed} per promoted job, waiting {prev active}.
]]
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/promoteDelayedJobs"
--- @include "includes/removeLock"
--- @include "includes/updateJobFields"

local jobKey = KEYS[4]
local jobId = ARGV[4]

-- Promotion happens even when the retry itself is refused below.
local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[1])
promoteDelayedJobs(KEYS[7], KEYS[10], KEYS[2], KEYS[8], KEYS[6], ARGV[1], ARGV[2], KEYS[9], isPausedOrMaxed)

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end

local lockResult = removeLock(jobKey, KEYS[11], ARGV[5], jobId)
if lockResult < 0 then
  return lockResult
end

updateJobFields(jobKey, ARGV[6])

if redis.call("LREM", KEYS[1], -1, jobId) == 0 then
  return -3
end

-- The job just left active, which may un-max the queue.
isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[1])

local priority = tonumber(redis.call("HGET", jobKey, "priority")) or 0
if priority == 0 then
  addJobInTargetList(KEYS[2], KEYS[10], ARGV[3], isPausedOrMaxed, jobId)
else
  addJobWithPriority(KEYS[10], KEYS[8], priority, jobId, KEYS[9], isPausedOrMaxed)
end

redis.call("HINCRBY", jobKey, "atm", 1)

local maxEvents = getOrSetMaxEvents(KEYS[5])
redis.call("XADD", KEYS[6], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId, "prev", "active")

return 0
