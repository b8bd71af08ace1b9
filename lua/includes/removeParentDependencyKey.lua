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

  When a hard removal also removes the parent, the parent's own deduplication
  id is freed as any removal frees it (only while the parent still owns it,
  with its pending `dn:`), on both paths: BullMQ 6.7.6's effect. (6.2.0 and
  6.7.0 deleted the key named by the removed child's `deid` instead, owner or
  not, and left the parent's behind: docs/compat.md §BullMQ 6.7.6.)
]]
--- @include "includes/removeDeduplicationKeyIfNeeded"
--- @include "includes/removeJobKeys"
--- @include "includes/jobKeyParts"
--- @include "includes/pushParentToWait"

local function removeParentDependencyKey(jobKey, hard, parentKey, prefix)
  if not parentKey then
    local storedParentKey = redis.call("HGET", jobKey, "parentKey")
    if type(storedParentKey) ~= "string" or storedParentKey == "" or
      redis.call("EXISTS", storedParentKey) ~= 1 then
      return false
    end
    parentKey = storedParentKey
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
          -- Read before the hash goes: the removal below deletes it.
          local parentDeduplicationId = redis.call("HGET", parentKey, "deid")
          removeParentDependencyKey(parentKey, hard, nil, prefix)
          removeJobKeys(parentKey)
          removeDeduplicationKeyIfNeededOnRemoval(parentPrefix, parentId, parentDeduplicationId)
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
