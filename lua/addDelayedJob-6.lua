--[[
  addDelayedJob: add a job with opts.delay > 0 to the delayed set
  (docs/protocol.md §Scripts). It reaches wait/prioritized when promoted.

  KEYS
    1 {P}marker   2 {P}meta        3 {P}id
    4 {P}delayed  5 {P}completed   6 {P}events
  ARGV
    1 AddArgs (msgpack array, see addStandardJob)
    2 job data (JSON text)
    3 JobOpts (msgpack map)
  Returns
    the job id | existing id (duplicate) | owner id (deduplicated) | -5 | -7
  Events: added, delayed {jobId, delay = absolute due ms}.
]]
--- @include "includes/addDelayedJobToSet"
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"

local result, job = prepareJobAdd(KEYS[2], KEYS[3], KEYS[5], KEYS[4], KEYS[6], ARGV[1], ARGV[2], ARGV[3])
if result ~= nil then
  return result
end

local delay = storeJob(KEYS[6], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp,
  job.parentKey, job.parentData, job.repeatJobKey)

addDelayedJobToSet(KEYS[4], KEYS[6], KEYS[1], job.maxEvents, job.jobId, job.timestamp, delay)

if job.parentDependenciesKey ~= nil then
  redis.call("SADD", job.parentDependenciesKey, job.jobKey)
end

return job.jobId
