--[[
  moveJobsToWait: bulk move of failed, completed or delayed jobs to waiting
  (Node's queue.retryJobs and queue.promoteJobs).

  KEYS[1] {P}
  KEYS[2] {P}events
  KEYS[3] {P}<state>: the set the jobs come from
  KEYS[4] {P}wait
  KEYS[5] {P}paused (unused, kept for the KEYS contract)
  KEYS[6] {P}meta
  KEYS[7] {P}active
  KEYS[8] {P}marker
  ARGV[1] how many jobs this call may move
  ARGV[2] only jobs scored at or before this (a timestamp, or +inf)
  ARGV[3] the state name: failed, completed or delayed

  Returns 1 when the whole count was used (the caller calls again), else 0.
  Every job goes to the head of wait with LPUSH: priority and lifo are not
  looked at, a delayed job keeps its `delay` field. A retried flow child is
  pending for its parent again (moveChildBackToParentDependencies).
  Event per job: capped `waiting {jobId, prev: <state>}`.
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/batches"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/moveChildBackToParentDependencies"

local prefix = KEYS[1]
local state = ARGV[3]
local budget = tonumber(ARGV[1])
local isPausedOrMaxed = isQueuePausedOrMaxed(KEYS[6], KEYS[7])

local ids = redis.call("ZRANGEBYSCORE", KEYS[3], 0, ARGV[2], "LIMIT", 0, budget)
if #ids > 0 then
  -- The result of the finished attempt goes; attempt counters stay.
  local resultField = nil
  if state == "failed" then
    resultField = "failedReason"
  elseif state == "completed" then
    resultField = "returnvalue"
  end
  if resultField then
    for _, id in ipairs(ids) do
      redis.call("HDEL", prefix .. id, "finishedOn", "processedOn", resultField)
      moveChildBackToParentDependencies(prefix .. id, state)
    end
  end

  local maxEvents = getOrSetMaxEvents(KEYS[6])
  for _, id in ipairs(ids) do
    redis.call("XADD", KEYS[2], "MAXLEN", "~", maxEvents, "*", "event", "waiting",
      "jobId", id, "prev", state)
  end

  for from, to in batches(#ids, 7000) do
    redis.call("ZREM", KEYS[3], unpack(ids, from, to))
    redis.call("LPUSH", KEYS[4], unpack(ids, from, to))
  end

  addBaseMarkerIfNeeded(KEYS[8], isPausedOrMaxed)
end

if budget - #ids <= 0 then
  return 1
end
return 0
