--[[
  getRateLimitTtl: how long until the queue's rate limiter lets the next job
  start (docs/protocol.md §Rate limiting).

  KEYS
    1 {P}limiter
    2 {P}meta
  ARGV
    1 max jobs per window, or "0": use the global limit of meta (`max`) when
      one is set, else answer the limiter key's plain PTTL
  Returns
    ms left (> 0) when the window's budget is used up, 0 when a job may start;
    with "0" and no global limit, the PTTL (-2 no key, -1 no expiry).
]]
local limiterKey = KEYS[1]

local function ttlWhenExhausted(maxJobs)
  local taken = tonumber(redis.call("GET", limiterKey)) or 0
  if maxJobs and taken >= maxJobs then
    local ttl = redis.call("PTTL", limiterKey)
    if ttl == 0 then
      -- Expires this very millisecond: clear it so the next fetch is not held.
      redis.call("DEL", limiterKey)
    elseif ttl > 0 then
      return ttl
    end
  end
  return 0
end

if ARGV[1] ~= "0" then
  return ttlWhenExhausted(tonumber(ARGV[1]))
end
local globalMax = redis.call("HGET", KEYS[2], "max")
if globalMax then
  return ttlWhenExhausted(tonumber(globalMax))
end
return redis.call("PTTL", limiterKey)
