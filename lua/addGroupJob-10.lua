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
    6 "1" inside a flow insert: the group's max size is not checked (a
      refused child would leave half a flow; docs/groups.md §Flows)
  With opts.delay > 0 the job is not in the group's set yet: it waits in
  {P}gr:g:<gid>:delayed, scored by its due ms on Redis's clock (TIME + delay),
  and the group in {P}gr:delayed by its earliest due ms (both built here from
  {P}, under the queue's hash tag); releaseGroupJobs moves it into the
  group's set once due. Event `delayed` {jobId, delay = due ms}, as
  addDelayedJob's. The max size counts both sets. The group's score in
  {P}gr:busy is set (markBusy, includes/groupQueue).
  A parent in AddArgs makes the job a child as addStandardJob does: parent
  fields in its hash, its key in the parent's :dependencies; once released and
  finished, BullMQ's moveToFinished updates the parent.
  Returns
    the job id (the existing id for a duplicate custom id; the owner's id
    when deduplicated, with nothing else written but the id counter and the
    `deduplicated` event, as addStandardJob), or
    {"full", maxSize} when the group already holds maxSize unreleased jobs:
    checked first, so a refused add writes nothing (not even the id counter);
    -5 missing parent, -7 the existing job belongs to another parent.
  Events: added (or duplicated / deduplicated), delayed for a delayed job.
]]
--- @include "includes/prepareJobAdd"
--- @include "includes/storeJob"
--- @include "includes/groupQueue"

local gid = ARGV[4]
local delayedKey = KEYS[9] .. ":delayed"
local maxSize = tonumber(redis.call("HGET", KEYS[9], "maxSize"))
if maxSize and ARGV[6] ~= "1"
    and redis.call("ZCARD", KEYS[10]) + redis.call("ZCARD", delayedKey) >= maxSize then
  return { "full", maxSize }
end

local result, job = prepareJobAdd(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3])
if result ~= nil then
  return result
end

storeJob(KEYS[5], job.jobKey, job.jobId, job.name, job.data, job.opts, job.timestamp, job.parentKey,
  job.parentData, nil)
if job.parentDependenciesKey ~= nil then
  redis.call("SADD", job.parentDependenciesKey, job.jobKey)
end

redis.call("ZADD", KEYS[7], "NX", "0", gid)
local delay = tonumber(job.opts["delay"]) or 0
if delay > 0 then
  local t = redis.call("TIME")
  local due = string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + delay)
  redis.call("ZADD", delayedKey, due, job.jobId)
  -- The group's earliest due time (LT: an earlier one replaces it).
  redis.call("ZADD", job.prefix .. "gr:delayed", "LT", due, gid)
  redis.call("XADD", KEYS[5], "MAXLEN", "~", job.maxEventsArg, "*", "event", "delayed", "jobId", job.jobId,
    "delay", due)
  markBusy(job.prefix, gid)
  return job.jobId
end

-- priority × 2^32 + a per-group counter: priority first, then the order of adds.
local counter = redis.call("HINCRBY", KEYS[9], "pc", 1)
local priority = tonumber(ARGV[5]) or 0
redis.call("ZADD", KEYS[10], string.format("%d", priority * 4294967296 + counter), job.jobId)
if redis.call("HEXISTS", KEYS[9], "paused") == 0 then
  enqueueGroup(KEYS[6], KEYS[8], gid)
end
markBusy(job.prefix, gid)
return job.jobId
