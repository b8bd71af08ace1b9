--[[
  addParentJob: add the parent of a flow. It is stored like any job, then
  parked in waiting-children until its last dependency finishes
  (docs/flows.md). A flow producer adds the parent before its children, in
  one transaction, so the children find it (their parent check).

  KEYS
    1 {P}meta       2 {P}id          3 {P}delayed
    4 {P}waiting-children            5 {P}completed   6 {P}events
  ARGV
    1 AddArgs (msgpack array, see addStandardJob)
    2 job data (JSON text)
    3 JobOpts (msgpack map)
  Returns
    the job id | existing id (duplicate) | owner id (deduplicated) | -5
  Events: added, waiting-children {jobId} (capped).
]]
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"

local result, job = prepareJobAdd(KEYS[1], KEYS[2], KEYS[5], KEYS[3], KEYS[6], ARGV[1], ARGV[2], ARGV[3])
if result ~= nil then
  return result
end

storeJob(KEYS[6], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp,
  job.parentKey, job.parentData, job.repeatJobKey)

redis.call("ZADD", KEYS[4], job.timestamp, job.jobId)
redis.call("XADD", KEYS[6], "MAXLEN", "~", job.maxEvents, "*", "event", "waiting-children",
  "jobId", job.jobId)

if job.parentDependenciesKey ~= nil then
  redis.call("SADD", job.parentDependenciesKey, job.jobKey)
end

return job.jobId
