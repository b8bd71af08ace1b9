--[[
  H2: target length of the events stream. A queue created by a client that
  never wrote the field still needs a bound, so the BullMQ default is stored.
]]
local function getOrSetMaxEvents(metaKey)
  local maxEvents = redis.call("HGET", metaKey, "opts.maxLenEvents")
  if not maxEvents then
    maxEvents = 10000
    redis.call("HSET", metaKey, "opts.maxLenEvents", maxEvents)
  end
  return tonumber(maxEvents)
end
