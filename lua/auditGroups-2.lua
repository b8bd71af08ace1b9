--[[
  auditGroups: EchoMQ extension (docs/groups.md §Audit), read-only. One
  bounded step over the group structures of a queue for the consistency
  audit; the caller pages (every read takes at most `count` elements).

  KEYS
    1 {P}gr:index    2 {P}gr:jobs
  ARGV
    1 {P}   2 step   3 where (an offset or a SCAN cursor)   4 count
    5 group id (steps "wait", "delayed" and "active")
  Steps and replies
    "groups": {{gid, paused 1/0}, …} — index entries where .. where+count-1
    "wait":   {ids} — the group's unreleased ids, where .. where+count-1
    "delayed": {1/0 the group is in {P}gr:delayed, {ids}} — the group's
              delayed ids, where .. where+count-1
    "active": {cursor, {ids}} — one SSCAN step of the group's active set
    "jobs":   {cursor, {{job id, group id, "gone"|"finished"|"open"}, …}} —
              one HSCAN step of gr:jobs, each job's hash read in this call
]]
local prefix, step = ARGV[1], ARGV[2]
local where, count = ARGV[3], tonumber(ARGV[4]) or 100
local base = prefix .. "gr:g:" .. (ARGV[5] or "")
if step == "groups" then
  local from = tonumber(where) or 0
  local rows = {}
  for _, gid in ipairs(redis.call("ZRANGE", KEYS[1], from, from + count - 1)) do
    local paused = redis.call("HEXISTS", prefix .. "gr:g:" .. gid, "paused")
    rows[#rows + 1] = {gid, paused}
  end
  return rows
elseif step == "wait" then
  local from = tonumber(where) or 0
  return redis.call("ZRANGE", base .. ":wait", from, from + count - 1)
elseif step == "delayed" then
  -- With whether the group is in {P}gr:delayed (else nothing promotes them).
  local from = tonumber(where) or 0
  local indexed = redis.call("ZSCORE", prefix .. "gr:delayed", ARGV[5] or "") and 1 or 0
  return {indexed, redis.call("ZRANGE", base .. ":delayed", from, from + count - 1)}
elseif step == "active" then
  return redis.call("SSCAN", base .. ":active", where, "COUNT", count)
end
local scan = redis.call("HSCAN", KEYS[2], where, "COUNT", count)
local jobs = {}
local flat = scan[2]
for i = 1, #flat, 2 do
  local jobKey = prefix .. flat[i]
  local state = "open"
  if redis.call("EXISTS", jobKey) == 0 then
    state = "gone"
  elseif redis.call("HEXISTS", jobKey, "finishedOn") == 1 then
    state = "finished"
  end
  jobs[#jobs + 1] = {flat[i], flat[i + 1], state}
end
return {scan[1], jobs}
