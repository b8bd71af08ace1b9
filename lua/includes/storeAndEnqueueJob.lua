--[[
  H7 store-and-enqueue: store a job built inside a script (dedup-next requeue,
  scheduler iterations) and route it like the producer would have chosen the
  add script: delayed, prioritized, or wait (RPUSH for lifo).
  storeAndEnqueueJob(prefix, jobId, name, data, opts, timestamp, parentKey,
                     parentData, repeatJobKey, maxEvents)
]]
--- @include "includes/addDelayedJobToSet"
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/storeJob"

local function storeAndEnqueueJob(prefix, jobId, name, data, opts, timestamp, parentKey, parentData,
                                  repeatJobKey, maxEvents)
  local eventsKey = prefix .. "events"
  local markerKey = prefix .. "marker"
  local delay, priority = storeJob(eventsKey, prefix .. jobId, jobId, name, data, opts, timestamp,
    parentKey, parentData, repeatJobKey)

  if delay ~= 0 then
    addDelayedJobToSet(prefix .. "delayed", eventsKey, markerKey, maxEvents, jobId, timestamp, delay)
    return
  end

  local isPausedOrMaxed = isQueuePausedOrMaxed(prefix .. "meta", prefix .. "active")
  if priority > 0 then
    addJobWithPriority(markerKey, prefix .. "prioritized", priority, jobId, prefix .. "pc", isPausedOrMaxed)
  else
    local pushCmd = opts["lifo"] and "RPUSH" or "LPUSH"
    addJobInTargetList(prefix .. "wait", markerKey, pushCmd, isPausedOrMaxed, jobId)
  end
  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)
end
