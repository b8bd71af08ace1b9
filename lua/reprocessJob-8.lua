--[[
  reprocessJob: put a completed or failed job back into wait (docs/protocol.md §Scripts,
  Node `job.retry(state)`).

  KEYS[1] job key
  KEYS[2] {P}events
  KEYS[3] {P}completed or {P}failed (the state the job is expected in)
  KEYS[4] {P}wait
  KEYS[5] {P}meta
  KEYS[6] {P}paused (unused, kept for the KEYS contract)
  KEYS[7] {P}active
  KEYS[8] {P}marker
  ARGV[1] job id
  ARGV[2] "RPUSH" for lifo jobs, else "LPUSH"
  ARGV[3] result field to drop: "failedReason" or "returnvalue"
  ARGV[4] "failed" or "completed"
  ARGV[5] "1" to reset attemptsMade (atm)
  ARGV[6] "1" to reset attemptsStarted (ats)

  Returns 1, -1 when the job does not exist, -3 when it is not in KEYS[3].
  Event: capped `waiting {jobId, prev: <ARGV[4]>}`.
  Quirk kept (BullMQ 6.2.0): the job always goes to wait, even with a priority.
]]
local rcall = redis.call

--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobInTargetList"

local jobKey = KEYS[1]
local jobId = ARGV[1]

if rcall("EXISTS", jobKey) ~= 1 then
  return -1
end

if rcall("ZREM", KEYS[3], jobId) == 0 then
  return -3
end

local fieldsToRemove = { "finishedOn", "processedOn", ARGV[3] }
if ARGV[5] == "1" then
  fieldsToRemove[#fieldsToRemove + 1] = "atm"
end
if ARGV[6] == "1" then
  fieldsToRemove[#fieldsToRemove + 1] = "ats"
end
rcall("HDEL", jobKey, unpack(fieldsToRemove))

local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[7])
addJobInTargetList(KEYS[4], KEYS[8], ARGV[2], isPausedOrMaxed, jobId)

-- The parent must wait for this child again: turn its recorded outcome back
-- into a pending dependency.
local parentKey = rcall("HGET", jobKey, "parentKey")
if parentKey and rcall("EXISTS", parentKey) == 1 then
  local pending = false
  if ARGV[4] == "failed" then
    local fromUnsuccessful = rcall("ZREM", parentKey .. ":unsuccessful", jobKey)
    local fromFailed = rcall("HDEL", parentKey .. ":failed", jobKey)
    pending = fromUnsuccessful + fromFailed > 0
  else
    pending = rcall("HDEL", parentKey .. ":processed", jobKey) > 0
  end
  if pending then
    rcall("SADD", parentKey .. ":dependencies", jobKey)
  end
end

local maxEvents = getOrSetMaxEvents(KEYS[5])
rcall("XADD", KEYS[2], "MAXLEN", "~", maxEvents, "*", "event", "waiting",
  "jobId", jobId, "prev", ARGV[4])
return 1
