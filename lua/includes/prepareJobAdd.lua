--[[
  Steps 1-5 shared by the add scripts (docs/protocol.md §Scripts, addStandardJob): parent check, id
  counter, id choice, duplicate custom id (H9), deduplication (H10).
  prepareJobAdd(metaKey, idKey, completedKey, delayedKey, eventsKey,
                packedArgs, data, packedOpts, g) -> result, job
    g       addStandardJobs' group state, or nil: its `meta` keeps the read
            of meta for the entries after the first (no add writes those
            fields but opts.maxLenEvents when missing, kept in the read)
    result  non-nil when the add ends here: -5, -7, the existing id of a
            duplicate or the owner id of a deduplicated add
    job     {prefix, jobId, jobKey, name, timestamp, data, opts, parentKey,
             parent, parentData, parentDependenciesKey, repeatJobKey,
             deferParentRelease, maxEvents, maxEventsArg, paused,
             concurrency} for the
            store/enqueue steps; paused and concurrency are meta's fields,
            read here with maxLenEvents (isJobQueuePausedOrMaxed uses them)
]]

-- A closure is allocated for every `local function` statement a call runs:
-- the helpers of duplicates and deduplication are created on those paths only.
local function addHelpers()
  --- @include "includes/deduplicateJob"
  --- @include "includes/handleDuplicatedJob"
  return { deduplicateJob = deduplicateJob, handleDuplicatedJob = handleDuplicatedJob }
end

-- isQueuePausedOrMaxed on the meta fields prepareJobAdd read.
local function isJobQueuePausedOrMaxed(job, activeKey)
  if job.paused then
    return true
  end
  local concurrency = tonumber(job.concurrency)
  if concurrency then
    return redis.call("LLEN", activeKey) >= concurrency
  end
  return false
end

local function prepareJobAdd(metaKey, idKey, completedKey, delayedKey, eventsKey, packedArgs, data, packedOpts, g)
  local args = cmsgpack.unpack(packedArgs)
  -- Every field the add sets later is named here (false until set), so the
  -- table is created at its final size instead of growing on the way.
  local job = {
    prefix = args[1],
    name = args[3],
    timestamp = args[4],
    data = data,
    parentKey = args[5],
    parentDependenciesKey = args[6],
    parent = args[7],
    repeatJobKey = args[8],
    deferParentRelease = args[10],
    jobId = false,
    jobKey = false,
    opts = false,
    maxEvents = false,
    maxEventsArg = false,
    paused = false,
    concurrency = false,
  }

  if job.parentKey ~= nil then
    if redis.call("EXISTS", job.parentKey) ~= 1 then
      return -5
    end
    job.parentData = cjson.encode(job.parent)
  end

  -- Incremented on every add, used or not: generated ids have gaps.
  local counter = redis.call("INCR", idKey)
  -- getOrSetMaxEvents, with the fields the enqueue step needs in the same read.
  local meta = g and g.meta
  if not meta then
    meta = redis.call("HMGET", metaKey, "opts.maxLenEvents", "paused", "concurrency")
  end
  local maxEvents = meta[1]
  if not maxEvents then
    maxEvents = "10000"
    redis.call("HSET", metaKey, "opts.maxLenEvents", maxEvents)
    meta[1] = maxEvents
  end
  if g then
    g.meta = meta
  end
  job.maxEvents = tonumber(maxEvents)
  -- XADD's MAXLEN as the stored text when that is what the number formats to:
  -- a Lua number argument costs Redis a float formatting.
  local canonical = maxEvents == "10000" or string.find(maxEvents, "^[1-9]%d*$")
  job.maxEventsArg = canonical and maxEvents or job.maxEvents
  job.paused, job.concurrency = meta[2], meta[3]

  local customId = args[2]
  if customId ~= nil and customId ~= "" then
    job.jobId = customId
    job.jobKey = job.prefix .. customId
    if redis.call("EXISTS", job.jobKey) == 1 then
      return addHelpers().handleDuplicatedJob(job.jobKey, customId, job.parentKey, job.parent, job.parentData,
        job.parentDependenciesKey, completedKey, eventsKey, job.maxEvents, job.timestamp, job.deferParentRelease)
    end
  else
    job.jobId = string.format("%d", counter)
    job.jobKey = job.prefix .. job.jobId
  end

  job.opts = cmsgpack.unpack(packedOpts)

  local deduplicationOpts = job.opts["de"]
  if type(deduplicationOpts) == "table" and deduplicationOpts["id"] ~= nil then
    local deduplicationKey = args[9] or (job.prefix .. "de:" .. deduplicationOpts["id"])
    local ownerId = addHelpers().deduplicateJob(job.prefix, deduplicationOpts, job.jobId, deduplicationKey, delayedKey,
      eventsKey, job.maxEvents, job)
    if ownerId then
      return ownerId
    end
  end

  return nil, job
end
