--[[
  addPrioritizedJob: add a non-delayed job with opts.priority > 0 to the
  prioritized set (docs/protocol.md §Scripts).

  KEYS
    1 {P}marker   2 {P}meta      3 {P}id          4 {P}prioritized
    5 {P}delayed  6 {P}completed 7 {P}active      8 {P}events
    9 {P}pc
  ARGV
    1 AddArgs (msgpack array, see addStandardJob)
    2 job data (JSON text)
    3 JobOpts (msgpack map)
  Returns
    the job id | existing id (duplicate) | owner id (deduplicated) | -5 | -7
  Events: added, waiting.
]]
--- @include "includes/addJobWithPriority"
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"

local result, job = prepareJobAdd(KEYS[2], KEYS[3], KEYS[6], KEYS[5], KEYS[8], ARGV[1], ARGV[2], ARGV[3])
if result ~= nil then
  return result
end

local _, priority = storeJob(KEYS[8], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp,
  job.parentKey, job.parentData, job.repeatJobKey)

local isPausedOrMaxed = isJobQueuePausedOrMaxed(job, KEYS[7])
addJobWithPriority(KEYS[1], KEYS[4], priority, job.jobId, KEYS[9], isPausedOrMaxed)

redis.call("XADD", KEYS[8], "MAXLEN", "~", job.maxEventsArg, "*", "event", "waiting", "jobId", job.jobId)

if job.parentDependenciesKey ~= nil then
  redis.call("SADD", job.parentDependenciesKey, job.jobKey)
end

return job.jobId
