--[[
  moveToDelayed: move an active job to delayed, for a retry with backoff or
  because the processor asked for a delay (docs/protocol.md §Scripts).

  KEYS
    1 {P}marker   2 {P}active    3 {P}prioritized  4 {P}delayed
    5 job key {P}<id>            6 {P}events       7 {P}meta
    8 {P}stalled  9 {P}wait      10 {P}limiter     11 {P}pc
  ARGV
    1 {P}
    2 now (ms)
    3 job id
    4 lock token ("0" = no lock check)
    5 delay (ms, relative to now)
    6 skip attempt: 1 = do not count an attempt, 0 = count it
    7 FieldsToUpdate (msgpack) or ""
    8 fetch next: 1 | 0
    9 FetchOpts (msgpack) when fetching, else ""
  Returns
    0, a next-job reply carrying a job, or -1 -2 -3 -6.
  Events: delayed {jobId, delay = absolute due ms}, and those of fetch-next.
]]
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/fetchNextJob"
--- @include "includes/getDelayedScore"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/removeLock"
--- @include "includes/updateJobFields"

local jobKey = KEYS[5]
local jobId = ARGV[3]

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end

local lockResult = removeLock(jobKey, KEYS[8], ARGV[4], jobId)
if lockResult < 0 then
  return lockResult
end

updateJobFields(jobKey, ARGV[7])

if redis.call("LREM", KEYS[2], -1, jobId) == 0 then
  return -3
end

local score, due = getDelayedScore(KEYS[4], ARGV[2], ARGV[5])

if ARGV[6] == "0" then
  redis.call("HINCRBY", jobKey, "atm", 1)
end

-- The hash keeps the relative delay; the event carries the due time.
redis.call("HSET", jobKey, "delay", ARGV[5])

local maxEvents = getOrSetMaxEvents(KEYS[7])
redis.call("ZADD", KEYS[4], score, jobId)
redis.call("XADD", KEYS[6], "MAXLEN", "~", maxEvents, "*", "event", "delayed", "jobId", jobId,
  "delay", string.format("%d", due))

if ARGV[8] == "1" then
  local opts = cmsgpack.unpack(ARGV[9])
  local reply = fetchNextJob(KEYS[9], KEYS[2], KEYS[3], KEYS[6], KEYS[10], KEYS[4], KEYS[7], KEYS[11], KEYS[1],
    ARGV[1], ARGV[2], opts, false)
  -- Only a taken job is worth returning; idle states are left to the worker loop.
  if reply ~= nil and type(reply[1]) == "table" then
    return reply
  end
end

addDelayMarkerIfNeeded(KEYS[1], KEYS[4])
return 0
