--[[
  H11: move every delayed job that is due at `timestamp` (at most 1000 per
  call) to wait or prioritized, in score order. Promoted jobs go to the head
  of wait even when they were added with lifo: only their priority is kept.
  g: a group call's deferred writes (includes/groupWrites), or nil; its
  dueUntil skips the read when an earlier one showed nothing due by then.
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/batches"
--- @include "includes/getPriorityScore"

local function promoteDelayedJobs(delayedKey, markerKey, waitKey, prioritizedKey, eventsKey, prefix,
                                  timestamp, priorityCounterKey, isPausedOrMaxed, g)
  local now = tonumber(timestamp)
  if g and g.dueUntil and now <= g.dueUntil then
    return
  end
  -- Last score of the millisecond `timestamp`: every sequence slot of it counts as due.
  -- Sent as text: a Lua number costs Redis a float formatting per argument.
  local maxScore = string.format("%d", (now + 1) * 0x1000 - 1)
  local jobIds = redis.call("ZRANGEBYSCORE", delayedKey, "0", maxScore, "LIMIT", "0", "1000")
  -- Fewer than the page: after this promotion nothing due by `now` is left.
  if g and #jobIds < 1000 and (g.dueUntil == nil or now > g.dueUntil) then
    g.dueUntil = now
  end
  if #jobIds == 0 then
    return
  end

  for from, to in batches(#jobIds, 7000) do
    redis.call("ZREM", delayedKey, unpack(jobIds, from, to))
  end

  for _, jobId in ipairs(jobIds) do
    local jobKey = prefix .. jobId
    local priority = tonumber(redis.call("HGET", jobKey, "priority")) or 0
    if priority == 0 then
      redis.call("LPUSH", waitKey, jobId)
    else
      redis.call("ZADD", prioritizedKey, getPriorityScore(priority, priorityCounterKey), jobId)
    end
    redis.call("XADD", eventsKey, "*", "event", "waiting", "jobId", jobId, "prev", "delayed")
    -- The hash keeps the requested delay only while the job is delayed.
    redis.call("HSET", jobKey, "delay", 0)
  end

  addBaseMarkerIfNeeded(markerKey, isPausedOrMaxed)
end
