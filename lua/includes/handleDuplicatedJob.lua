--[[
  H9: an add whose custom id already exists stores nothing. It may only
  attach the existing job to the new parent (flows re-adding a child), and
  if that child already completed, its result is handed to the parent at once.
  A child whose recorded parent no longer exists is free to be attached.
  handleDuplicatedJob(jobKey, jobId, parentKey, parent, parentData,
                      parentDependenciesKey, completedKey, eventsKey,
                      maxEvents, timestamp, deferParentRelease) -> jobId or -7
    parent              decoded parent descriptor (table) or nil
    parentData          the same descriptor as JSON
    deferParentRelease  truthy inside a flow insert: the parent's other
                        children may not be stored yet, so a completed child
                        only records its result and the parent is released by
                        releaseParentIfNoPendingDependencies after the flow;
                        a refused attach marks the parent `flowAttachmentFailed`
                        for that script to clear
]]
--- @include "includes/moveParentToWait"

local function handleDuplicatedJob(jobKey, jobId, parentKey, parent, parentData, parentDependenciesKey,
                                   completedKey, eventsKey, maxEvents, timestamp, deferParentRelease)
  local existingParentKey = redis.call("HGET", jobKey, "parentKey")

  if not existingParentKey or existingParentKey == parentKey
      or redis.call("EXISTS", existingParentKey) == 0 then
    if parentKey ~= nil then
      if redis.call("ZSCORE", completedKey, jobId) then
        local returnvalue = redis.call("HGET", jobKey, "returnvalue") or "null"
        redis.call("HSET", parentKey .. ":processed", jobKey, returnvalue)
        if not deferParentRelease then
          local parentPrefix, parentId = getParentPrefixAndId(parentKey, parent)
          moveParentToWaitIfNoPendingDependencies(parentPrefix, parentKey, parentId, timestamp)
        end
      elseif parentDependenciesKey ~= nil then
        redis.call("SADD", parentDependenciesKey, jobKey)
      end
      redis.call("HMSET", jobKey, "parentKey", parentKey, "parent", parentData)
    end
  elseif parentKey ~= nil then
    -- A child belongs to one parent; a still existing other parent wins.
    if deferParentRelease then
      redis.call("HSET", parentKey, "flowAttachmentFailed", "1")
    end
    return -7
  end

  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", jobId)
  return jobId
end
