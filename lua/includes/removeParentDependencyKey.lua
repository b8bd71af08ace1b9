--[[
  removeParentDependencyKey(jobKey, hard, parentKey, prefix) -> bool

  H19 "detach from parent", run when a child job is removed. Returns true when
  the child was still a pending dependency of its parent.
    jobKey     full key of the child being removed
    hard       true when the whole queue content is being destroyed (clean,
               drain, obliterate): a parent in the same queue that would be
               released is removed as well instead of being woken up
    parentKey  the parent's full key, or nil to read it from the child's
               `parentKey` field (then used only while that parent exists)
    prefix     "{P}" of the queue doing the removal

  When a hard removal also removes the parent, the deduplication key named by
  the removed child's `deid` is deleted under the parent's prefix without
  checking who owns it: BullMQ (6.2.0, 6.7.0) does so, and both must leave the same
  keyspace. Only the path that reads the parent from the child does this.
]]
--- @include "includes/removeJobKeys"
--- @include "includes/jobKeyParts"
--- @include "includes/pushParentToWait"

local function removeParentDependencyKey(jobKey, hard, parentKey, prefix)
  local childDeduplicationId = nil
  if not parentKey then
    local stored = redis.call("HMGET", jobKey, "parentKey", "deid")
    local storedParentKey = stored[1]
    if type(storedParentKey) ~= "string" or storedParentKey == "" or
      redis.call("EXISTS", storedParentKey) ~= 1 then
      return false
    end
    parentKey = storedParentKey
    childDeduplicationId = stored[2]
  end

  local dependenciesKey = parentKey .. ":dependencies"
  if redis.call("SREM", dependenciesKey, jobKey) == 0 then
    return false
  end

  -- The parent only becomes runnable when this was its last pending child and
  -- it is actually parked waiting for children.
  if redis.call("SCARD", dependenciesKey) == 0 then
    local parentId = getJobIdFromKey(parentKey)
    local parentPrefix = getJobKeyPrefix(parentKey, parentId)
    if redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 1 then
      if hard then
        if parentPrefix == prefix then
          removeParentDependencyKey(parentKey, hard, nil, prefix)
          removeJobKeys(parentKey)
          if childDeduplicationId then
            redis.call("DEL", parentPrefix .. "de:" .. childDeduplicationId)
          end
        else
          pushParentToWait(parentPrefix, parentId, false)
        end
      else
        pushParentToWait(parentPrefix, parentId, true)
      end
    end
  end
  return true
end
