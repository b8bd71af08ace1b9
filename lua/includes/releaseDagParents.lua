--[[
  releaseDagParents(jobKey, parentsKey, pendingKey, completedKey, failedKey,
  jobId, now, budget): hands a finished DAG node to at most `budget` of its
  extra parents (the contract is lua/releaseDagParents-5.lua's). Returns the
  extra parents left (0: done, the id left the pending set) or -1 (the node
  has not finished, or failed without a failure rule: nothing changed).
  Keys: the node's hash and `:dag:parents`, its queue's `dag:pending`,
  `completed` and `failed`; each extra parent's keys are named by
  `:dag:parents` (the parent's queue shares the node's hash slot).
]]
--- @include "includes/updateParentOnChildFinish"
--- @include "includes/pushParentToWait"

local function releaseDagParents(jobKey, parentsKey, pendingKey, completedKey, failedKey, jobId, now, budget)
  budget = tonumber(budget)
  if budget == nil or budget < 1 then
    budget = 1
  end

  if redis.call("EXISTS", parentsKey) == 0 then
    redis.call("SREM", pendingKey, jobId)
    return 0
  end

  local mode, value
  local flags = {}
  if redis.call("EXISTS", jobKey) == 0 then
    mode = "removed"
  elseif redis.call("ZSCORE", completedKey, jobId) then
    mode = "completed"
    value = redis.call("HGET", jobKey, "returnvalue") or "null"
  elseif redis.call("ZSCORE", failedKey, jobId) then
    local fields = redis.call("HMGET", jobKey, "parent", "failedReason")
    if fields[1] then
      local ok, decoded = pcall(cjson.decode, fields[1])
      if ok and type(decoded) == "table" then
        flags = decoded
      end
    end
    if not (flags["fpof"] or flags["cpof"] or flags["idof"] or flags["rdof"]) then
      return -1
    end
    mode = "failed"
    value = fields[2] or ""
  else
    return -1
  end

  local parents = redis.call("HRANDFIELD", parentsKey, budget, "WITHVALUES")
  for i = 1, #parents, 2 do
    local parentKey = parents[i]
    local parentPrefix = parents[i + 1] .. ":"
    local parentId = string.sub(parentKey, #parentPrefix + 1)
    if mode == "completed" then
      updateParentOnChildCompleted(parentKey, parentPrefix, parentId, jobKey, value, now)
    elseif mode == "failed" then
      updateParentOnChildFailed(parentKey, parentPrefix, parentId, flags, jobKey, value, now)
    else
      local dependenciesKey = parentKey .. ":dependencies"
      if redis.call("SREM", dependenciesKey, jobKey) == 1 and redis.call("SCARD", dependenciesKey) == 0
          and redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 1 then
        pushParentToWait(parentPrefix, parentId, true)
      end
    end
    redis.call("HDEL", parentsKey, parentKey)
  end

  local left = redis.call("HLEN", parentsKey)
  if left == 0 then
    redis.call("SREM", pendingKey, jobId)
  end
  return left
end
