--[[
  Steps 1-5 shared by the add scripts (docs/protocol.md §Scripts, addStandardJob): parent check, id
  counter, id choice, duplicate custom id (H9), deduplication (H10).
  prepareJobAdd(metaKey, idKey, completedKey, delayedKey, eventsKey,
                packedArgs, data, packedOpts) -> result, job
    result  non-nil when the add ends here: -5, -7, the existing id of a
            duplicate or the owner id of a deduplicated add
    job     {prefix, jobId, jobKey, name, timestamp, data, opts, parentKey,
             parent, parentData, parentDependenciesKey, repeatJobKey,
             maxEvents} for the store/enqueue steps
]]
--- @include "includes/deduplicateJob"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/handleDuplicatedJob"

local function prepareJobAdd(metaKey, idKey, completedKey, delayedKey, eventsKey, packedArgs, data, packedOpts)
  local args = cmsgpack.unpack(packedArgs)
  local job = {
    prefix = args[1],
    name = args[3],
    timestamp = args[4],
    data = data,
    parentKey = args[5],
    parentDependenciesKey = args[6],
    parent = args[7],
    repeatJobKey = args[8],
  }

  if job.parentKey ~= nil then
    if redis.call("EXISTS", job.parentKey) ~= 1 then
      return -5
    end
    job.parentData = cjson.encode(job.parent)
  end

  -- Incremented on every add, used or not: generated ids have gaps.
  local counter = redis.call("INCR", idKey)
  job.maxEvents = getOrSetMaxEvents(metaKey)

  local customId = args[2]
  if customId ~= nil and customId ~= "" then
    job.jobId = customId
    job.jobKey = job.prefix .. customId
    if redis.call("EXISTS", job.jobKey) == 1 then
      return handleDuplicatedJob(job.jobKey, customId, job.parentKey, job.parent, job.parentData,
        job.parentDependenciesKey, completedKey, eventsKey, job.maxEvents, job.timestamp)
    end
  else
    job.jobId = string.format("%d", counter)
    job.jobKey = job.prefix .. job.jobId
  end

  job.opts = cmsgpack.unpack(packedOpts)

  local deduplicationOpts = job.opts["de"]
  if type(deduplicationOpts) == "table" and deduplicationOpts["id"] ~= nil then
    local deduplicationKey = args[9] or (job.prefix .. "de:" .. deduplicationOpts["id"])
    local ownerId = deduplicateJob(job.prefix, deduplicationOpts, job.jobId, deduplicationKey, delayedKey,
      eventsKey, job.maxEvents, job)
    if ownerId then
      return ownerId
    end
  end

  return nil, job
end
