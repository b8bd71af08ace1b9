--[[
  H19 release: a flow parent whose children are done leaves waiting-children
  for its own queue (given by its prefix "{P}"), honouring its delay and
  priority like a fresh add. The events go to the parent's queue stream.
  `timestamp` (ms) is the base of the delay; `emitEvent` false suppresses
  the stream entries.
  Removal-time detaching uses pushParentToWait instead (no delay/priority).
]]
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/jobKeyParts"

local function moveParentToWait(parentPrefix, parentId, emitEvent, timestamp)
  local parentKey = parentPrefix .. parentId
  local eventsKey = parentPrefix .. "events"
  local markerKey = parentPrefix .. "marker"
  local fields = redis.call("HMGET", parentKey, "priority", "delay")
  local priority = tonumber(fields[1]) or 0
  local delay = tonumber(fields[2]) or 0

  if delay > 0 then
    -- Flow releases use the bare millisecond slot, without a sequence number.
    local due = tonumber(timestamp) + delay
    local delayedKey = parentPrefix .. "delayed"
    redis.call("ZADD", delayedKey, due * 0x1000, parentId)
    if emitEvent then
      redis.call("XADD", eventsKey, "*", "event", "delayed", "jobId", parentId,
        "delay", string.format("%d", due))
    end
    addDelayMarkerIfNeeded(markerKey, delayedKey)
    return
  end

  local isPausedOrMaxed = isQueuePausedOrMaxed(parentPrefix .. "meta", parentPrefix .. "active")
  if priority == 0 then
    addJobInTargetList(parentPrefix .. "wait", markerKey, "RPUSH", isPausedOrMaxed, parentId)
  else
    addJobWithPriority(markerKey, parentPrefix .. "prioritized", priority, parentId,
      parentPrefix .. "pc", isPausedOrMaxed)
  end
  if emitEvent then
    redis.call("XADD", eventsKey, "*", "event", "waiting", "jobId", parentId, "prev", "waiting-children")
  end
end

-- Releases the parent once its last pending child is gone, but only when it is
-- really parked in waiting-children (it may be active, failed or removed).
local function moveParentToWaitIfNoPendingDependencies(parentPrefix, parentKey, parentId, timestamp)
  if redis.call("SCARD", parentKey .. ":dependencies") ~= 0 then
    return false
  end
  if redis.call("EXISTS", parentKey) ~= 1 then
    return false
  end
  if redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 1 then
    moveParentToWait(parentPrefix, parentId, true, timestamp)
    return true
  end
  return false
end

-- Parent prefix and id, preferring the `parent` descriptor ({id, queueKey})
-- because ids may contain ':'; falls back to splitting the key.
local function getParentPrefixAndId(parentKey, parent)
  if type(parent) == "table" and parent["id"] and parent["queueKey"] then
    return parent["queueKey"] .. ":", tostring(parent["id"])
  end
  local parentId = getJobIdFromKey(parentKey)
  return getJobKeyPrefix(parentKey, parentId), parentId
end
