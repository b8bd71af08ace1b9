--[[
  H4: the marker member "1" carries the due time of the earliest delayed job
  (score / 4096, possibly fractional) so that blocked workers wake up in time.
  Not gated by pause: a paused worker just re-blocks.
]]
local function getNextDelayedTimestamp(delayedKey)
  local first = redis.call("ZRANGE", delayedKey, 0, 0, "WITHSCORES")
  if first[1] then
    return tonumber(first[2]) / 0x1000
  end
  return nil
end

local function addDelayMarkerIfNeeded(markerKey, delayedKey)
  local nextTimestamp = getNextDelayedTimestamp(delayedKey)
  if nextTimestamp ~= nil then
    redis.call("ZADD", markerKey, nextTimestamp, "1")
  end
end
