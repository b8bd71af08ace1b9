--[[
  promote: move one delayed job to waiting now (docs/protocol.md §Scripts).

  KEYS[1] {P}delayed
  KEYS[2] {P}wait
  KEYS[3] {P}paused (unused, kept for the KEYS contract)
  KEYS[4] {P}meta
  KEYS[5] {P}prioritized
  KEYS[6] {P}active
  KEYS[7] {P}pc
  KEYS[8] {P}events
  KEYS[9] {P}marker
  ARGV[1] {P}
  ARGV[2] job id

  Returns 0, or -3 when the job is not in delayed. As in BullMQ 6.2.0 and 6.7.0 the job
  hash is not checked for existence.
  Event: uncapped `waiting {jobId, prev: delayed}`.
]]
local rcall = redis.call

--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"

local jobId = ARGV[2]
local jobKey = ARGV[1] .. jobId

if rcall("ZREM", KEYS[1], jobId) == 0 then
  return -3
end

local priority = tonumber(rcall("HGET", jobKey, "priority")) or 0
local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[4], KEYS[6])

-- A BullMQ <= 4 marker at the head of wait would otherwise be handed out
-- right after the promoted job.
local head = rcall("LINDEX", KEYS[2], 0)
if head and string.sub(head, 1, 2) == "0:" then
  rcall("LPOP", KEYS[2])
end

if priority == 0 then
  addJobInTargetList(KEYS[2], KEYS[9], "LPUSH", isPausedOrMaxed, jobId)
else
  addJobWithPriority(KEYS[9], KEYS[5], priority, jobId, KEYS[7], isPausedOrMaxed)
end

rcall("XADD", KEYS[8], "*", "event", "waiting", "jobId", jobId, "prev", "delayed")
rcall("HSET", jobKey, "delay", 0)
return 0
