--[[
  isLocked(prefix, jobId, removeChildren) -> bool
  removeJobWithChildren(prefix, jobId, parentKey, options)

  H18. isLocked: the job has a `:lock`, or (removeChildren true) any of its
  pending children, in their own queues, recursively has one.

  removeJobWithChildren removes a job from whatever state it is in, with its
  keys and (options.removeChildren) its whole subtree, depth first. Every job
  whose keys existed gets a capped `removed {jobId, prev}` on its own queue's
  stream.
    parentKey  the full key of the parent when called for a child, else nil
    options    { removeChildren = bool, ignoreProcessed = bool,
                 ignoreLocked = bool }
]]
--- @include "includes/jobKeyParts"
--- @include "includes/removeJobKeys"
--- @include "includes/removeDeduplicationKeyIfNeeded"
--- @include "includes/removeParentDependencyKey"
--- @include "includes/removeJobFromAnyState"
--- @include "includes/getOrSetMaxEvents"

local function isLocked(prefix, jobId, removeChildren)
  local jobKey = prefix .. jobId
  if redis.call("EXISTS", jobKey .. ":lock") == 1 then
    return true
  end
  if removeChildren then
    local dependencies = redis.call("SMEMBERS", jobKey .. ":dependencies")
    for _, childKey in ipairs(dependencies) do
      local childId = getJobIdFromKey(childKey)
      if isLocked(getJobKeyPrefix(childKey, childId), childId, removeChildren) then
        return true
      end
    end
  end
  return false
end

-- Mutually recursive with removeJobWithChildren.
local removeJobChildren

local function removeJobWithChildren(prefix, jobId, parentKey, options)
  local jobKey = prefix .. jobId

  if options.ignoreLocked and isLocked(prefix, jobId, false) then
    return
  end

  if options.ignoreProcessed and redis.call("ZSCORE", prefix .. "failed", jobId) then
    return
  end

  removeParentDependencyKey(jobKey, false, parentKey, prefix)

  if options.removeChildren then
    removeJobChildren(prefix, jobKey, options)
  end

  local prev = removeJobFromAnyState(prefix, jobId)
  removeDeduplicationKeyIfNeededOnRemoval(prefix, jobId, redis.call("HGET", jobKey, "deid"))
  if removeJobKeys(jobKey) > 0 then
    local maxEvents = getOrSetMaxEvents(prefix .. "meta")
    redis.call("XADD", prefix .. "events", "MAXLEN", "~", maxEvents, "*", "event", "removed",
      "jobId", jobId, "prev", prev)
  end
end

local function removeChildByKey(childKey, parentKey, options)
  local childId = getJobIdFromKey(childKey)
  removeJobWithChildren(getJobKeyPrefix(childKey, childId), childId, parentKey, options)
end

removeJobChildren = function(prefix, jobKey, options)
  if not options.ignoreProcessed then
    -- Finished children are only referenced from these three structures.
    local processed = redis.call("HKEYS", jobKey .. ":processed")
    for _, childKey in ipairs(processed) do
      removeChildByKey(childKey, jobKey, options)
    end
    local failed = redis.call("HKEYS", jobKey .. ":failed")
    for _, childKey in ipairs(failed) do
      removeChildByKey(childKey, jobKey, options)
    end
    local unsuccessful = redis.call("ZRANGE", jobKey .. ":unsuccessful", 0, -1)
    for _, childKey in ipairs(unsuccessful) do
      removeChildByKey(childKey, jobKey, options)
    end
  end
  local dependencies = redis.call("SMEMBERS", jobKey .. ":dependencies")
  for _, childKey in ipairs(dependencies) do
    removeChildByKey(childKey, jobKey, options)
  end
end
