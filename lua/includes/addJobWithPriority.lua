--[[
  H7 prioritized: a fresh counter value puts the job behind every job of the
  same priority already waiting.
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/getPriorityScore"

local function addJobWithPriority(markerKey, prioritizedKey, priority, jobId, priorityCounterKey, isPausedOrMaxed)
  local score = getPriorityScore(priority, priorityCounterKey)
  redis.call("ZADD", prioritizedKey, score, jobId)
  addBaseMarkerIfNeeded(markerKey, isPausedOrMaxed)
end
