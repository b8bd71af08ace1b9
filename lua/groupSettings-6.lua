--[[
  groupSettings: EchoMQ extension (docs/groups.md). Changes one group's
  settings; a group may be configured (or paused) before it has jobs.

  KEYS
    1 {P}gr:g:<gid>   2 {P}gr:g:<gid>:wait   3 {P}gr:ready
    4 {P}gr:index     5 {P}gr:seq            6 {P}gr:limited
  ARGV
    1 group id
    2 op: "set" (ARGV 3.. field/value pairs: concurrency, max, duration,
      maxSize), "unset" (ARGV 3.. fields), "pause", "resume"
  Returns
    1 when something changed, 0 when not (pause of a paused group, resume of
    a running one).
  Events: none (the feeder wakes on its timer or the next event).
]]
--- @include "includes/groupQueue"

local gid = ARGV[1]
local op = ARGV[2]
local changed = 0
if op == "pause" then
  changed = redis.call("HSETNX", KEYS[1], "paused", "1")
  redis.call("ZREM", KEYS[3], gid)
  redis.call("ZREM", KEYS[6], gid)
elseif op == "resume" then
  changed = redis.call("HDEL", KEYS[1], "paused")
elseif op == "set" then
  for i = 3, #ARGV, 2 do
    if redis.call("HGET", KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
      redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
      changed = 1
    end
  end
elseif op == "unset" then
  for i = 3, #ARGV do
    changed = math.max(changed, redis.call("HDEL", KEYS[1], ARGV[i]))
  end
end
redis.call("ZADD", KEYS[4], "NX", "0", gid)
-- A raised limit or a resume may let the group run: the release checks.
if redis.call("HEXISTS", KEYS[1], "paused") == 0 and redis.call("ZCARD", KEYS[2]) > 0
  and not redis.call("ZSCORE", KEYS[6], gid) then
  enqueueGroup(KEYS[3], KEYS[5], gid)
end
return changed
