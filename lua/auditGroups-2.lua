--[[
  auditGroups: EchoMQ extension (docs/groups.md §Audit), read-only. The group
  structures of a queue for the consistency audit, bounded by `limit` groups.

  KEYS
    1 {P}gr:index    2 {P}gr:jobs
  ARGV
    1 {P}   2 limit (groups)
  Returns
    {groups, jobs}: groups = {{gid, {unreleased ids}, {active ids}, paused,
    concurrency or ""}, …}; jobs = {{job id, group id, job state}, …} for every
    entry of gr:jobs, state = "gone", "finished" or "open".
]]
local prefix = ARGV[1]
local groups = {}
for _, gid in ipairs(redis.call("ZRANGE", KEYS[1], 0, (tonumber(ARGV[2]) or 1000) - 1)) do
  local base = prefix .. "gr:g:" .. gid
  local s = redis.call("HMGET", base, "paused", "concurrency")
  groups[#groups + 1] = { gid, redis.call("ZRANGE", base .. ":wait", 0, -1), redis.call("SMEMBERS", base .. ":active"),
    s[1] and 1 or 0, s[2] or "" }
end
local jobs = {}
local flat = redis.call("HGETALL", KEYS[2])
for i = 1, #flat, 2 do
  local jobKey = prefix .. flat[i]
  local state = "open"
  if redis.call("EXISTS", jobKey) == 0 then
    state = "gone"
  elseif redis.call("HEXISTS", jobKey, "finishedOn") == 1 then
    state = "finished"
  end
  jobs[#jobs + 1] = { flat[i], flat[i + 1], state }
end
return { groups, jobs }
