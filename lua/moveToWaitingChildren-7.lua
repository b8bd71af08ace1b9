--[[
  moveToWaitingChildren: an active job that still has pending children gives
  up its lock and parks in waiting-children; its last child moves it back to
  wait (docs/flows.md §Waiting for children).

  KEYS
    1 {P}active     2 {P}waiting-children   3 {P}<id>
    4 {P}<id>:dependencies                  5 {P}<id>:unsuccessful
    6 {P}stalled    7 {P}events
  ARGV
    1 lock token
    2 full key of one child to wait for, or "" for any pending child
    3 timestamp (the waiting-children score)
    4 job id
    5 {P} (unused: kept for the frozen ARGV order)
  Returns
    0 parked | 1 nothing pending, the job stays active and locked
    -1 missing job | -2 missing lock | -6 lock of another token
    -3 not in active | -9 a child failed its parent
  Events: waiting-children {jobId, prev = active} (uncapped).
]]
--- @include "includes/removeLock"

local jobKey = KEYS[3]
local jobId = ARGV[4]

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end
if redis.call("ZCARD", KEYS[5]) ~= 0 then
  return -9
end

local pending
if ARGV[2] ~= "" then
  pending = redis.call("SISMEMBER", KEYS[4], ARGV[2]) ~= 0
else
  pending = redis.call("SCARD", KEYS[4]) ~= 0
end
if not pending then
  return 1
end

local lockResult = removeLock(jobKey, KEYS[6], ARGV[1], jobId)
if lockResult < 0 then
  return lockResult
end
if redis.call("LREM", KEYS[1], -1, jobId) < 1 then
  return -3
end

redis.call("ZADD", KEYS[2], tonumber(ARGV[3]), jobId)
redis.call("XADD", KEYS[7], "*", "event", "waiting-children", "jobId", jobId, "prev", "active")
return 0
