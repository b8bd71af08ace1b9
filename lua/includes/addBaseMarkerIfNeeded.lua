--[[
  H3: wake one blocked worker. Paused or maxed queues stay silent so that
  idle workers keep blocking instead of spinning on moveToActive.
]]
local function addBaseMarkerIfNeeded(markerKey, isPausedOrMaxed)
  if not isPausedOrMaxed then
    redis.call("ZADD", markerKey, "0", "0")
  end
end
