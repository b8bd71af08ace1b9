--[[
  moveJobFromActiveToWait: put an active job back in front of the queue
  after a manual rate limit, without counting an attempt (docs/protocol.md §Scripts).

  KEYS
    1 {P}active   2 {P}wait      3 {P}stalled      4 {P}paused (unused)
    5 {P}meta     6 {P}limiter   7 {P}prioritized  8 {P}marker
    9 {P}events
  ARGV
    1 job id
    2 lock token ("0" = no lock check)
    3 job key {P}<id>
  Returns
    the remaining PTTL of the limiter when positive, else 0; -1 -2 -6.
  Events: waiting {prev active}.
]]
--- @include "includes/addJobInTargetList"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/removeLock"

local jobId = ARGV[1]
local jobKey = ARGV[3]

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end

local lockResult = removeLock(jobKey, KEYS[3], ARGV[2], jobId)
if lockResult < 0 then
  return lockResult
end

if redis.call("LREM", KEYS[1], 1, jobId) > 0 then
  local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[1])
  local priority = tonumber(redis.call("HGET", jobKey, "priority")) or 0
  if priority > 0 then
    -- Counter 0: ahead of every job of its priority. No marker, as in BullMQ
    -- (the worker is rate limited anyway and fetches again after the window).
    redis.call("ZADD", KEYS[7], priority * 0x100000000, jobId)
  else
    addJobInTargetList(KEYS[2], KEYS[8], "RPUSH", isPausedOrMaxed, jobId)
  end
  local maxEvents = getOrSetMaxEvents(KEYS[5])
  redis.call("XADD", KEYS[9], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId, "prev", "active")
end

local ttl = redis.call("PTTL", KEYS[6])
if ttl > 0 then
  return ttl
end
return 0
