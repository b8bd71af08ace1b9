--[[
  obliterate: destroy a paused queue, at most ARGV[1] jobs per call
  (docs/protocol.md §Scripts).

  KEYS[1] {P}meta
  KEYS[2] {P} (the prefix itself)
  ARGV[1] budget: maximum number of jobs (and schedulers) deleted in this call
  ARGV[2] "force" to also delete active jobs, else ""

  Returns 0 done (every queue key deleted), 1 budget exhausted (call again),
  -1 queue not paused, -2 active jobs exist and no force.
  No events: the stream itself is deleted at the end. Not touched (as in
  BullMQ 6.2.0 and 6.7.0): waiting-children jobs, {P}limiter, {P}de:*, {P}dn:*.
]]
local rcall = redis.call

--- @include "includes/removeJob"
--- @include "includes/removeListJobs"
--- @include "includes/removeZSetJobs"
--- @include "includes/batches"

local budget = tonumber(ARGV[1])
local prefix = KEYS[2]

if rcall("HEXISTS", KEYS[1], "paused") ~= 1 then
  return -1
end

local activeKey = prefix .. "active"
local activeIds = rcall("LRANGE", activeKey, 0, budget - 1)
if #activeIds > 0 and ARGV[2] == "" then
  return -2
end

-- Forced: the owning workers lose their jobs; their locks must go too so no
-- later stalled check or lock renewal resurrects anything.
for _, jobId in ipairs(activeIds) do
  rcall("DEL", prefix .. jobId .. ":lock")
  removeJob(jobId, true, prefix, true)
end
rcall("LTRIM", activeKey, #activeIds, -1)
budget = budget - #activeIds
if budget <= 0 then
  return 1
end

budget = removeZSetJobs(prefix .. "delayed", true, prefix, budget)
if budget <= 0 then
  return 1
end

local repeatKey = prefix .. "repeat"
local schedulerIds = rcall("ZRANGE", repeatKey, 0, budget - 1)
for _, schedulerId in ipairs(schedulerIds) do
  rcall("DEL", repeatKey .. ":" .. schedulerId)
end
for from, to in batches(#schedulerIds, 7000) do
  rcall("ZREM", repeatKey, unpack(schedulerIds, from, to))
end
budget = budget - #schedulerIds
if budget <= 0 then
  return 1
end

budget = removeZSetJobs(prefix .. "completed", true, prefix, budget)
if budget <= 0 then
  return 1
end

budget = removeListJobs(prefix .. "wait", true, prefix, budget)
if budget <= 0 then
  return 1
end

budget = removeListJobs(prefix .. "paused", true, prefix, budget)
if budget <= 0 then
  return 1
end

budget = removeZSetJobs(prefix .. "prioritized", true, prefix, budget)
if budget <= 0 then
  return 1
end

budget = removeZSetJobs(prefix .. "failed", true, prefix, budget)
if budget <= 0 then
  return 1
end

rcall("DEL", prefix .. "events", prefix .. "delay", prefix .. "stalled-check",
  prefix .. "stalled", prefix .. "id", prefix .. "pc", prefix .. "marker",
  prefix .. "meta", prefix .. "metrics:completed", prefix .. "metrics:completed:data",
  prefix .. "metrics:failed", prefix .. "metrics:failed:data")
return 0
