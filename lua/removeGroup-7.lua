--[[
  removeGroup: EchoMQ extension (docs/groups.md). Removes up to `limit` of a
  group's unreleased jobs per call; once none is left, forgets the group (its
  settings, its place in the round robin and the index). Released jobs are
  BullMQ jobs by then: they run on, and their slots are freed as they finish.

  KEYS
    1 {P}gr:g:<gid>   2 {P}gr:g:<gid>:wait   3 {P}gr:ready   4 {P}gr:index
    5 {P}gr:limited   6 {P}events            7 {P}meta
  ARGV
    1 {P}   2 group id   3 limit
  Returns
    {removed by this call, unreleased jobs left}
  Events: removed (prev waiting), per job.
]]
--- @include "includes/getOrSetMaxEvents"

local prefix = ARGV[1]
local gid = ARGV[2]
local popped = redis.call("ZPOPMIN", KEYS[2], tonumber(ARGV[3]) or 1000)
local removed = 0
local maxEvents
for i = 1, #popped, 2 do
  local jobId = popped[i]
  if redis.call("DEL", prefix .. jobId) == 1 then
    redis.call("DEL", prefix .. jobId .. ":logs")
    maxEvents = maxEvents or getOrSetMaxEvents(KEYS[7])
    redis.call("XADD", KEYS[6], "MAXLEN", "~", maxEvents, "*", "event", "removed", "jobId", jobId, "prev",
      "waiting")
    removed = removed + 1
  end
end
local left = redis.call("ZCARD", KEYS[2])
if left == 0 then
  redis.call("DEL", KEYS[1], prefix .. "gr:g:" .. gid .. ":window")
  redis.call("ZREM", KEYS[3], gid)
  redis.call("ZREM", KEYS[4], gid)
  redis.call("ZREM", KEYS[5], gid)
end
return { removed, left }
