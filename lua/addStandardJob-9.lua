--[[
  addStandardJob: add a job that is neither delayed nor prioritized to wait
  (docs/protocol.md §Scripts).

  KEYS
    1 {P}wait          2 {P}paused (unused)   3 {P}meta
    4 {P}id            5 {P}completed         6 {P}delayed
    7 {P}active        8 {P}events            9 {P}marker
  ARGV
    1 AddArgs (msgpack array: prefix, custom id, name, timestamp, parent key,
      parent dependencies key, parent descriptor, repeat job key, dedup key,
      defer parent release: 1 inside a flow insert, see handleDuplicatedJob)
    2 job data (JSON text, stored verbatim)
    3 JobOpts (msgpack map, stored form)
  Returns
    the job id; the existing id for a duplicate custom id; the owner id when
    deduplicated; -5 missing parent; -7 parent cannot be replaced.
  Events: added, waiting (or duplicated / deduplicated, removed).
]]
--- @include "includes/addJobInTargetList"
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"

local result, job = prepareJobAdd(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[8], ARGV[1], ARGV[2], ARGV[3])
if result ~= nil then
  return result
end

storeJob(KEYS[8], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp, job.parentKey,
  job.parentData, job.repeatJobKey)

local isPausedOrMaxed = isJobQueuePausedOrMaxed(job, KEYS[7])
-- Workers pop the tail of wait, so lifo jobs are appended there.
local pushCmd = job.opts["lifo"] and "RPUSH" or "LPUSH"
addJobInTargetList(KEYS[1], KEYS[9], pushCmd, isPausedOrMaxed, job.jobId)

redis.call("XADD", KEYS[8], "MAXLEN", "~", job.maxEventsArg, "*", "event", "waiting", "jobId", job.jobId)

if job.parentDependenciesKey ~= nil then
  redis.call("SADD", job.parentDependenciesKey, job.jobKey)
end

return job.jobId
