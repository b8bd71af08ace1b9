--[[
  removeGroup: EchoMQ extension (docs/groups.md). Removes up to `limit` of a
  group's unreleased jobs (waiting, then delayed) per call; once none is left, forgets the group (its
  settings, its place in the round robin and the index). Released jobs are
  BullMQ jobs by then: they run on, and their slots are freed as they finish.

  KEYS
    1 {P}gr:g:<gid>   2 {P}gr:g:<gid>:wait   3 {P}gr:ready   4 {P}gr:index
    5 {P}gr:limited   6 {P}events            7 {P}meta
  ARGV
    1 {P}   2 group id   3 limit
  Returns
    {removed by this call, unreleased jobs left}
  Events: removed (prev waiting, or delayed), per job. A removed job that owns its
  deduplication id frees it (as BullMQ's removeJob).
]]
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/removeDeduplicationKeyIfNeeded"
--- @include "includes/groupQueue"

local prefix = ARGV[1]
local gid = ARGV[2]
local limit = tonumber(ARGV[3]) or 1000
-- Its delayed jobs ({P}gr:g:<gid>:delayed, built from {P}) go too, after
-- the waiting ones, within the same limit.
local delayedKey = KEYS[1] .. ":delayed"
local popped = redis.call("ZPOPMIN", KEYS[2], limit)
local prev = {}
for i = 1, #popped, 2 do
  prev[#prev + 1] = "waiting"
end
if #popped < 2 * limit then
  local more = redis.call("ZPOPMIN", delayedKey, limit - #popped / 2)
  for i = 1, #more, 2 do
    popped[#popped + 1] = more[i]
    popped[#popped + 1] = more[i + 1]
    prev[#prev + 1] = "delayed"
  end
end
local removed = 0
local maxEvents
for i = 1, #popped, 2 do
  local jobId = popped[i]
  -- A deduplicated job frees its id as BullMQ's removeJob does.
  local deduplicationId = redis.call("HGET", prefix .. jobId, "deid")
  removeDeduplicationKeyIfNeededOnRemoval(prefix, jobId, deduplicationId)
  if redis.call("DEL", prefix .. jobId) == 1 then
    redis.call("DEL", prefix .. jobId .. ":logs")
    maxEvents = maxEvents or getOrSetMaxEvents(KEYS[7])
    redis.call("XADD", KEYS[6], "MAXLEN", "~", maxEvents, "*", "event", "removed", "jobId", jobId, "prev",
      prev[(i + 1) / 2])
    removed = removed + 1
  end
end
markBusy(prefix, gid)
local left = redis.call("ZCARD", KEYS[2]) + redis.call("ZCARD", delayedKey)
if left == 0 then
  redis.call("ZREM", prefix .. "gr:delayed", gid)
  redis.call("DEL", KEYS[1], prefix .. "gr:g:" .. gid .. ":window")
  redis.call("ZREM", KEYS[3], gid)
  redis.call("ZREM", KEYS[4], gid)
  redis.call("ZREM", KEYS[5], gid)
end
return { removed, left }
