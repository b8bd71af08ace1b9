--[[
  H7 standard: LPUSH = FIFO (workers pop the tail), RPUSH = run next.
]]
--- @include "includes/addBaseMarkerIfNeeded"

local function addJobInTargetList(targetKey, markerKey, pushCmd, isPausedOrMaxed, jobId)
  redis.call(pushCmd, targetKey, jobId)
  addBaseMarkerIfNeeded(markerKey, isPausedOrMaxed)
end
