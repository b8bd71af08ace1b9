--[[
  changePriority: change a job's priority, re-queueing it if it is ready
  (docs/protocol.md §Scripts).

  KEYS[1] {P}wait
  KEYS[2] {P}paused (unused, kept for the KEYS contract)
  KEYS[3] {P}meta
  KEYS[4] {P}prioritized
  KEYS[5] {P}active
  KEYS[6] {P}pc
  KEYS[7] {P}marker
  ARGV[1] new priority (integer, 0 = none)
  ARGV[2] {P}
  ARGV[3] job id
  ARGV[4] "1" lifo, "0" otherwise

  Returns 0, or -1 when the job does not exist. No event.
  A job that is neither prioritized nor waiting only gets its field changed.
]]
local rcall = redis.call

--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"

local priority = tonumber(ARGV[1])
local jobId = ARGV[3]
local jobKey = ARGV[2] .. jobId
local lifo = ARGV[4] == "1"

if rcall("EXISTS", jobKey) ~= 1 then
  return -1
end

local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[3], KEYS[5])

if rcall("ZREM", KEYS[4], jobId) > 0 or rcall("LREM", KEYS[1], -1, jobId) > 0 then
  if priority == 0 then
    local pushCmd = lifo and "RPUSH" or "LPUSH"
    addJobInTargetList(KEYS[1], KEYS[7], pushCmd, isPausedOrMaxed, jobId)
  elseif lifo then
    -- Counter 0 puts it in front of every job of the same priority; as in
    -- BullMQ no marker is written on this path.
    rcall("ZADD", KEYS[4], priority * 0x100000000, jobId)
  else
    addJobWithPriority(KEYS[7], KEYS[4], priority, jobId, KEYS[6], isPausedOrMaxed)
  end
end

rcall("HSET", jobKey, "priority", priority)
return 0
