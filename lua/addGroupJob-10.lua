--[[
  addGroupJob: EchoMQ extension (docs/groups.md). Store a job like
  addStandardJob, but keep it in its group's set instead of wait; a feeder
  releases it (releaseGroupJobs) while the group is under its budget.

  KEYS
    1 {P}meta        2 {P}id         3 {P}completed     4 {P}delayed
    5 {P}events      6 {P}gr:ready   7 {P}gr:index      8 {P}gr:seq
    9 {P}gr:g:<gid>  10 {P}gr:g:<gid>:wait
  ARGV
    1 AddArgs (msgpack, as addStandardJob)
    2 job data (JSON text)
    3 JobOpts (msgpack map, stored form)
    4 group id
    5 priority inside the group (0 = none; lower runs first)
  Returns
    the job id (the existing id for a duplicate custom id), or
    {"full", maxSize} when the group already holds maxSize unreleased jobs:
    checked first, so a refused add writes nothing (not even the id counter).
  Events: added (or duplicated).
]]
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"
--- @include "includes/groupQueue"

local gid = ARGV[4]
local maxSize = tonumber(redis.call("HGET", KEYS[9], "maxSize"))
if maxSize and redis.call("ZCARD", KEYS[10]) >= maxSize then
  return { "full", maxSize }
end

local result, job = prepareJobAdd(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3])
if result ~= nil then
  return result
end

storeJob(KEYS[5], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp, nil, nil, nil)

-- priority × 2^32 + a per-group counter: priority first, then the order of adds.
local counter = redis.call("HINCRBY", KEYS[9], "pc", 1)
local priority = tonumber(ARGV[5]) or 0
redis.call("ZADD", KEYS[10], string.format("%d", priority * 4294967296 + counter), job.jobId)
redis.call("ZADD", KEYS[7], "NX", "0", gid)
if redis.call("HEXISTS", KEYS[9], "paused") == 0 then
  enqueueGroup(KEYS[6], KEYS[8], gid)
end
return job.jobId
