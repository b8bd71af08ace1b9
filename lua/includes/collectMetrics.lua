--[[
  H20: per-minute throughput. `count` is the running total; one data point
  per elapsed minute is pushed at the head of the list (newest first), the
  minutes without any finish as zeros.
  collectMetrics(metricsKey, dataKey, maxDataPoints, timestamp)
]]
--- @include "includes/batches"

local function collectMetrics(metricsKey, dataKey, maxDataPoints, timestamp)
  local previousCount = redis.call("HINCRBY", metricsKey, "count", 1) - 1
  local fields = redis.call("HMGET", metricsKey, "prevTS", "prevCount")
  if not fields[1] then
    redis.call("HSET", metricsKey, "prevTS", timestamp, "prevCount", 0)
    return
  end

  local now = tonumber(timestamp)
  local elapsed = math.floor(now / 60000) - math.floor(tonumber(fields[1]) / 60000)
  local points = math.min(elapsed, tonumber(maxDataPoints))
  if points <= 0 then
    return
  end

  local values = { previousCount - (tonumber(fields[2]) or 0) }
  for i = 2, points do
    values[i] = 0
  end
  for from, to in batches(#values, 7000) do
    redis.call("LPUSH", dataKey, unpack(values, from, to))
  end
  redis.call("LTRIM", dataKey, 0, tonumber(maxDataPoints) - 1)
  redis.call("HSET", metricsKey, "prevCount", previousCount, "prevTS", timestamp)
end
