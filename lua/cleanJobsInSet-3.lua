--[[
  cleanJobsInSet: delete old jobs of one state (docs/protocol.md §Scripts, Node
  `queue.clean(grace, limit, type)`).

  KEYS[1] the state key {P}<state>
  KEYS[2] {P}events
  KEYS[3] {P}repeat
  ARGV[1] {P}
  ARGV[2] cutoff timestamp in ms (Node: now - grace)
  ARGV[3] limit: maximum deletions, 0 = unlimited
  ARGV[4] state: completed, failed, delayed, prioritized, wait, paused, active
          (any other name is treated like a finished set)

  Returns the array of deleted job ids.
  Event: uncapped `cleaned {count}` (also when nothing was deleted); no
  `removed` events.
  Quirk kept (H22): job timestamps are compared with the cutoff as strings,
  which equals a numeric comparison only for equal-length values.
]]
local rcall = redis.call

--- @include "includes/batches"
--- @include "includes/getTimestamp"
--- @include "includes/isJobSchedulerJob"
--- @include "includes/removeJob"

local setKey = KEYS[1]
local repeatKey = KEYS[3]
local prefix = ARGV[1]
local cutoff = ARGV[2]
local limit = tonumber(ARGV[3])
local state = ARGV[4]

local deleted = {}

local function isOlderThanCutoff(jobKey, fields)
  local jobTimestamp = getTimestamp(jobKey, fields)
  return not jobTimestamp or jobTimestamp <= cutoff
end

local function cleanList(skipLocked)
  local rangeStart = 0
  if limit > 0 then
    rangeStart = -limit
  end
  local jobIds = rcall("LRANGE", setKey, rangeStart, -1)
  -- Deleted entries are blanked in place first so that the indexes of the
  -- entries still to be visited stay valid, then dropped in one LREM.
  local deletionMark = ""
  for i, jobId in ipairs(jobIds) do
    if limit > 0 and #deleted >= limit then
      break
    end
    local jobKey = prefix .. jobId
    if (not skipLocked or rcall("EXISTS", jobKey .. ":lock") == 0) and
      not isJobSchedulerJob(jobId, jobKey, repeatKey) and
      isOlderThanCutoff(jobKey, { "finishedOn", "processedOn", "timestamp" }) then
      rcall("LSET", setKey, i - 1 - #jobIds, deletionMark)
      removeJob(jobId, true, prefix, true)
      deleted[#deleted + 1] = jobId
    end
  end
  -- The marks all sit in the window read from the tail: counted from the
  -- tail, LREM stops after the last one instead of walking the whole list
  -- (the same effect on any list no client wrote an empty id into).
  if #deleted > 0 then
    rcall("LREM", setKey, string.format("%d", -#deleted), deletionMark)
  end
end

local function cleanSet(maxScore, fields)
  local jobIds
  if limit > 0 then
    jobIds = rcall("ZRANGEBYSCORE", setKey, 0, maxScore, "LIMIT", 0, limit)
  else
    jobIds = rcall("ZRANGEBYSCORE", setKey, 0, maxScore)
  end
  for _, jobId in ipairs(jobIds) do
    if limit > 0 and #deleted >= limit then
      break
    end
    local jobKey = prefix .. jobId
    -- Finished sets are already selected by finishedOn (their score); only
    -- pending sets need the per-job timestamp and the scheduler guard.
    if not fields or
      (not isJobSchedulerJob(jobId, jobKey, repeatKey) and isOlderThanCutoff(jobKey, fields)) then
      removeJob(jobId, true, prefix, true)
      deleted[#deleted + 1] = jobId
    end
  end
  for from, to in batches(#deleted, 7000) do
    rcall("ZREM", setKey, unpack(deleted, from, to))
  end
end

if state == "active" then
  cleanList(true)
elseif state == "wait" or state == "paused" then
  cleanList(false)
elseif state == "delayed" then
  cleanSet("+inf", { "processedOn", "timestamp" })
elseif state == "prioritized" then
  cleanSet("+inf", { "timestamp" })
else
  cleanSet(cutoff, nil)
end

rcall("XADD", KEYS[2], "*", "event", "cleaned", "count", #deleted)
return deleted
