--[[
  H9: an add whose custom id already exists stores nothing. It may only
  attach the existing job to the new parent (flows re-adding a child), and
  if that child already completed, its result is handed to the parent at once.
  handleDuplicatedJob(jobKey, jobId, parentKey, parent, parentData,
                      parentDependenciesKey, completedKey, eventsKey,
                      maxEvents, timestamp) -> jobId or -7
    parent      decoded parent descriptor (table) or nil
    parentData  the same descriptor as JSON
]]
--- @include "includes/moveParentToWait"

local function handleDuplicatedJob(jobKey, jobId, parentKey, parent, parentData, parentDependenciesKey,
                                   completedKey, eventsKey, maxEvents, timestamp)
  local existingParentKey = redis.call("HGET", jobKey, "parentKey")

  if not existingParentKey or existingParentKey == parentKey then
    if parentKey ~= nil then
      if redis.call("ZSCORE", completedKey, jobId) then
        local returnvalue = redis.call("HGET", jobKey, "returnvalue") or "null"
        redis.call("HSET", parentKey .. ":processed", jobKey, returnvalue)
        local parentPrefix, parentId = getParentPrefixAndId(parentKey, parent)
        moveParentToWaitIfNoPendingDependencies(parentPrefix, parentKey, parentId, timestamp)
      elseif parentDependenciesKey ~= nil then
        redis.call("SADD", parentDependenciesKey, jobKey)
      end
      redis.call("HMSET", jobKey, "parentKey", parentKey, "parent", parentData)
    end
  elseif parentKey ~= nil and redis.call("EXISTS", existingParentKey) == 1 then
    -- A child belongs to one parent; a still existing other parent wins.
    return -7
  end

  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", jobId)
  return jobId
end
