--[[
  H7 delayed: the event carries the absolute due time, rendered as an integer
  so that 13-digit millisecond values never turn into exponent notation.
]]
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/getDelayedScore"

local function addDelayedJobToSet(delayedKey, eventsKey, markerKey, maxEvents, jobId, timestamp, delay)
  local score, due = getDelayedScore(delayedKey, timestamp, delay)
  redis.call("ZADD", delayedKey, score, jobId)
  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "delayed",
    "jobId", jobId, "delay", string.format("%d", due))
  addDelayMarkerIfNeeded(markerKey, delayedKey)
end
