--[[
  changeDelay: reschedule a delayed job to now + delay (docs/protocol.md §Scripts).

  KEYS[1] {P}delayed
  KEYS[2] {P}meta
  KEYS[3] {P}marker
  KEYS[4] {P}events
  ARGV[1] new delay in ms, relative to ARGV[2]
  ARGV[2] now (ms)
  ARGV[3] job id
  ARGV[4] job key

  Returns 0, -1 when the job does not exist, -3 when it is not delayed.
  Event: capped `delayed {jobId, delay: <absolute due time ms>}`.
]]
local rcall = redis.call

--- @include "includes/getOrSetMaxEvents"
--- @include "includes/getDelayedScore"
--- @include "includes/addDelayMarkerIfNeeded"

local jobId = ARGV[3]
local jobKey = ARGV[4]

if rcall("EXISTS", jobKey) ~= 1 then
  return -1
end

local delay = tonumber(ARGV[1])
-- Scored while the job is still in the set, as BullMQ does: a job moved
-- within its own millisecond takes the slot after its old one.
local score, due = getDelayedScore(KEYS[1], tonumber(ARGV[2]), delay)

if rcall("ZREM", KEYS[1], jobId) == 0 then
  return -3
end

rcall("HSET", jobKey, "delay", delay)
rcall("ZADD", KEYS[1], score, jobId)

local maxEvents = getOrSetMaxEvents(KEYS[2])
rcall("XADD", KEYS[4], "MAXLEN", "~", maxEvents, "*", "event", "delayed",
  "jobId", jobId, "delay", due)

addDelayMarkerIfNeeded(KEYS[3], KEYS[1])
return 0
