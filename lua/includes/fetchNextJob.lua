--[[
  H13: promote due delayed jobs, respect rate limit / pause / global
  concurrency, then take the tail of wait, else the lowest prioritized job.
  fetchNextJob(waitKey, activeKey, prioritizedKey, eventsKey, limiterKey,
               delayedKey, metaKey, priorityCounterKey, markerKey, prefix,
               timestamp, opts, isMoveToActive, meta, g) -> reply or nil
    opts            FetchOpts
    isMoveToActive  true: moveToActive flavour (retry the pop once after a
                    legacy marker, [0,0,0,0] when idle); false: fetch-next
                    flavour of the finishing scripts (nil when idle, so the
                    caller goes on with its own ending)
    meta            optional: the caller's HMGET of meta starting with paused,
                    concurrency, max, duration (nil: read here, or a
                    group's cached read)
    g               a group call's deferred writes (includes/groupWrites),
                    or nil
]]
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/prepareJobForProcessing"
--- @include "includes/promoteDelayedJobs"

-- "0:" read by byte: string.sub would make a string per take.
local function isLegacyMarker(jobId)
  return string.byte(jobId, 1) == 48 and string.byte(jobId, 2) == 58
end

local function fetchNextJob(waitKey, activeKey, prioritizedKey, eventsKey, limiterKey, delayedKey, metaKey,
                            priorityCounterKey, markerKey, prefix, timestamp, opts, isMoveToActive, meta, g)
  -- getQueueMeta, from a read the caller (or an earlier take of the same
  -- group) may have made with other fields.
  meta = meta or (g and g.meta) or redis.call("HMGET", metaKey, "paused", "concurrency", "max", "duration")
  if g then
    g.meta = meta
  end
  local isPausedOrMaxed = false
  if meta[1] then
    isPausedOrMaxed = true
  else
    -- Unset fields (false) are common: no tonumber call for them.
    local concurrency = meta[2] and tonumber(meta[2])
    if concurrency then
      isPausedOrMaxed = redis.call("LLEN", activeKey) >= concurrency
    end
  end
  local metaMax = meta[3] and tonumber(meta[3]) or nil
  local metaDuration = meta[4] and tonumber(meta[4]) or nil

  -- A group whose one read of delayed covers all its takes (noneDue) skips
  -- the call and its conversion of the time.
  if not (g and g.noneDue) then
    promoteDelayedJobs(delayedKey, markerKey, waitKey, prioritizedKey, eventsKey, prefix, timestamp,
      priorityCounterKey, isPausedOrMaxed, g)
  end

  local limiter = opts["limiter"]
  -- A global (meta) limit overrides the worker's own max.
  local maxJobs = metaMax
  -- Tested for nil first: type() costs a call and an interned string.
  if not maxJobs and limiter ~= nil and type(limiter) == "table" then
    maxJobs = tonumber(limiter["max"])
  end

  if maxJobs then
    local taken = tonumber(redis.call("GET", limiterKey)) or 0
    if taken >= maxJobs then
      local ttl = redis.call("PTTL", limiterKey)
      if ttl == 0 then
        redis.call("DEL", limiterKey)
      elseif ttl > 0 then
        return { 0, 0, ttl, 0 }
      end
    end
  end

  if isPausedOrMaxed then
    return { 0, 0, 0, 0 }
  end

  -- ...while the worker's own window length overrides the global one.
  local limiterDuration = nil
  if limiter ~= nil and type(limiter) == "table" then
    limiterDuration = tonumber(limiter["duration"])
  end
  limiterDuration = limiterDuration or metaDuration

  local tryPrioritized = true
  local jobId = redis.call("RPOPLPUSH", waitKey, activeKey)
  if jobId and isLegacyMarker(jobId) then
    -- BullMQ <= 4 signalled with fake ids in wait; they are dropped, never run.
    redis.call("LREM", activeKey, 1, jobId)
    if isMoveToActive then
      jobId = redis.call("RPOPLPUSH", waitKey, activeKey)
      if jobId and isLegacyMarker(jobId) then
        redis.call("LREM", activeKey, 1, jobId)
        jobId = false
      end
    else
      -- "0:0" said "a prioritized job is ready"; other markers said "nothing".
      tryPrioritized = jobId == "0:0"
      jobId = false
    end
  end

  if jobId then
    return prepareJobForProcessing(prefix, limiterKey, eventsKey, jobId, timestamp, maxJobs, limiterDuration,
      markerKey, opts, g)
  end

  if tryPrioritized then
    local popped = redis.call("ZPOPMIN", prioritizedKey)
    if popped[1] then
      redis.call("LPUSH", activeKey, popped[1])
      return prepareJobForProcessing(prefix, limiterKey, eventsKey, popped[1], timestamp, maxJobs,
        limiterDuration, markerKey, opts, g)
    end
    -- An empty set restarts the FIFO counter, keeping scores small.
    redis.call("DEL", priorityCounterKey)
  end

  local nextTimestamp = getNextDelayedTimestamp(delayedKey)
  if nextTimestamp ~= nil then
    return { 0, 0, 0, nextTimestamp }
  end
  if isMoveToActive then
    return { 0, 0, 0, 0 }
  end
  return nil
end
