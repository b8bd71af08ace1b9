--[[
  H1: whether the queue may be woken up. A paused queue, or one whose active
  list already holds meta `concurrency` jobs, must not get a ready marker.
]]
local function isQueuePausedOrMaxed(metaKey, activeKey)
  local meta = redis.call("HMGET", metaKey, "paused", "concurrency")
  if meta[1] then
    return true
  end
  local concurrency = tonumber(meta[2])
  if concurrency then
    return redis.call("LLEN", activeKey) >= concurrency
  end
  return false
end

local function isQueuePaused(metaKey)
  return redis.call("HEXISTS", metaKey, "paused") == 1
end

-- The fetch path also needs the global rate limit, read in the same round.
local function getQueueMeta(metaKey, activeKey)
  local meta = redis.call("HMGET", metaKey, "paused", "concurrency", "max", "duration")
  local pausedOrMaxed = false
  if meta[1] then
    pausedOrMaxed = true
  else
    local concurrency = tonumber(meta[2])
    if concurrency then
      pausedOrMaxed = redis.call("LLEN", activeKey) >= concurrency
    end
  end
  return pausedOrMaxed, tonumber(meta[3]), tonumber(meta[4])
end
