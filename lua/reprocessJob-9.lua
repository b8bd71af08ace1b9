--[[
  reprocessJob: put a completed or failed job back to be run again
  (docs/protocol.md §Scripts, Node `job.retry(state)`): to wait, or to
  prioritized when it has a priority.

  KEYS[1] job key
  KEYS[2] {P}events
  KEYS[3] {P}completed or {P}failed (the state the job is expected in)
  KEYS[4] {P}wait
  KEYS[5] {P}meta
  KEYS[6] {P}active
  KEYS[7] {P}marker
  KEYS[8] {P}prioritized
  KEYS[9] {P}pc
  ARGV[1] job id
  ARGV[2] "RPUSH" for lifo jobs, else "LPUSH"
  ARGV[3] result field to drop: "failedReason" or "returnvalue"
  ARGV[4] "failed" or "completed"
  ARGV[5] "1" to reset attemptsMade (atm)
  ARGV[6] "1" to reset attemptsStarted (ats)

  Returns 1, -1 when the job does not exist, -3 when it is not in KEYS[3].
  Event: capped `waiting {jobId, prev: <ARGV[4]>}`, also for a job that went
  to prioritized.
]]
local rcall = redis.call

--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"
--- @include "includes/moveChildBackToParentDependencies"

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

local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[6])
local priority = tonumber(rcall("HGET", jobKey, "priority")) or 0
if priority == 0 then
  addJobInTargetList(KEYS[4], KEYS[7], ARGV[2], isPausedOrMaxed, jobId)
else
  addJobWithPriority(KEYS[7], KEYS[8], priority, jobId, KEYS[9], isPausedOrMaxed)
end

moveChildBackToParentDependencies(jobKey, ARGV[4])

local maxEvents = getOrSetMaxEvents(KEYS[5])
rcall("XADD", KEYS[2], "MAXLEN", "~", maxEvents, "*", "event", "waiting",
  "jobId", jobId, "prev", ARGV[4])
return 1
