--[[
  H19 child rules, applied by moveToFinished to a job that has a parent.
  updateParentOnChildCompleted(parentKey, parentPrefix, parentId, childKey,
                               returnvalue, timestamp)
    records the result for the parent and releases it after its last child.
  updateParentOnChildFailed(parentKey, parentPrefix, parentId, parentFlags,
                            childKey, failedReason, timestamp)
    parentFlags: the child's decoded `parent` descriptor; its booleans fpof,
    cpof, idof, rdof (checked in that order) choose the rule. Without any of
    them the parent keeps waiting for this child.
  Every rule acts only if the child was still a pending dependency.
]]
--- @include "includes/moveParentToWait"

local function updateParentOnChildCompleted(parentKey, parentPrefix, parentId, childKey, returnvalue, timestamp)
  if redis.call("SREM", parentKey .. ":dependencies", childKey) == 1 then
    redis.call("HSET", parentKey .. ":processed", childKey, returnvalue)
    moveParentToWaitIfNoPendingDependencies(parentPrefix, parentKey, parentId, timestamp)
  end
end

local function updateParentOnChildFailed(parentKey, parentPrefix, parentId, parentFlags, childKey, failedReason,
                                         timestamp)
  local flags = type(parentFlags) == "table" and parentFlags or {}
  local dependenciesKey = parentKey .. ":dependencies"

  if flags["fpof"] then
    if redis.call("SREM", dependenciesKey, childKey) ~= 1 then
      return
    end
    redis.call("ZADD", parentKey .. ":unsuccessful", timestamp, childKey)
    local defa = "child " .. childKey .. " failed"
    local released = redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 1
    if not released and redis.call("ZREM", parentPrefix .. "delayed", parentId) == 1 then
      -- A delayed parent fails now, not at its due time.
      redis.call("HSET", parentKey, "delay", 0)
      released = true
    end
    if released then
      -- The parent is failed by whichever worker picks it up (deferred failure).
      redis.call("HSET", parentKey, "defa", defa)
      moveParentToWait(parentPrefix, parentId, true, timestamp)
    elseif not redis.call("ZSCORE", parentPrefix .. "failed", parentId) then
      redis.call("HSET", parentKey, "defa", defa)
    end
  elseif flags["cpof"] then
    if redis.call("SREM", dependenciesKey, childKey) ~= 1 then
      return
    end
    redis.call("HSET", parentKey .. ":failed", childKey, failedReason)
    -- The parent continues right away, even with other children still pending.
    if redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 1 then
      moveParentToWait(parentPrefix, parentId, true, timestamp)
    end
  elseif flags["idof"] or flags["rdof"] then
    if redis.call("SREM", dependenciesKey, childKey) ~= 1 then
      return
    end
    if flags["idof"] then
      redis.call("HSET", parentKey .. ":failed", childKey, failedReason)
    end
    moveParentToWaitIfNoPendingDependencies(parentPrefix, parentKey, parentId, timestamp)
  end
end
