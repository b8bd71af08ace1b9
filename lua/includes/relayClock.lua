--[[
  Relay time, always Redis's own: node leases, retained messages and the
  namespace's keys expire on one clock whatever the clocks of the nodes say.
]]

-- TIME as milliseconds since the epoch.
local function relayNowMs()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The largest score of a sorted set, 0 when it is empty or missing: the
-- latest lease (nodes) or expiry (retained messages, registry).
local function relayTopScore(key)
  local top = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
  if top[2] then
    return tonumber(top[2])
  end
  return 0
end
