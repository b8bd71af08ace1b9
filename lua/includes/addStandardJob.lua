--[[
  The body of one addStandardJob, shared by addStandardJob-9 (one job) and
  addStandardJobs-9 (several in one call, docs/protocol.md §Extensions): one
  Lua text, so the two cannot drift.
  addStandardJob(K, packedArgs, data, packedOpts, g) -> reply
    g  addStandardJobs' group state, or nil: meta is read once per group
       and the marker re-armed by its first add only (g.marked)
    K  addStandardJob's KEYS: 1 wait, 2 paused (unused), 3 meta, 4 id,
       5 completed, 6 delayed, 7 active, 8 events, 9 marker
  Returns what addStandardJob returns: the id, or -5 / -7.
]]
--- @include "includes/addJobInTargetList"
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"

local function addStandardJob(K, packedArgs, data, packedOpts, g)
  local result, job = prepareJobAdd(K[3], K[4], K[5], K[6], K[8], packedArgs, data, packedOpts, g)
  if result ~= nil then
    return result
  end

  storeJob(K[8], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp, job.parentKey,
    job.parentData, job.repeatJobKey)

  local isPausedOrMaxed = isJobQueuePausedOrMaxed(job, K[7])
  -- Workers pop the tail of wait, so lifo jobs are appended there.
  local pushCmd = job.opts["lifo"] and "RPUSH" or "LPUSH"
  if g and g.marked then
    -- Member "0" of the marker only ever gets score 0 and nothing an add does
    -- removes it: after one add of the group set it, the others' ZADD changes
    -- nothing.
    redis.call(pushCmd, K[1], job.jobId)
  else
    addJobInTargetList(K[1], K[9], pushCmd, isPausedOrMaxed, job.jobId)
    if g and not isPausedOrMaxed then
      g.marked = true
    end
  end

  redis.call("XADD", K[8], "MAXLEN", "~", job.maxEventsArg, "*", "event", "waiting", "jobId", job.jobId)

  if job.parentDependenciesKey ~= nil then
    redis.call("SADD", job.parentDependenciesKey, job.jobKey)
  end

  return job.jobId
end
