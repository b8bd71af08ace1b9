--[[
  accountGroupJobs: EchoMQ extension (docs/groups.md). Frees the group slot of
  every released job that has finished: its hash is gone (removed, retention)
  or has finishedOn (completed, finally failed). The job hash is the truth, so
  calling it twice, or for a job not finished, changes nothing. The group's
  score in {P}gr:busy is set again (markBusy).

  KEYS
    1 {P}gr:jobs     2 {P}gr:ready    3 {P}gr:seq
  ARGV
    1 {P}
    2 cursor: "" to check the ids ARGV[4..]; else an HSCAN cursor of gr:jobs
    3 HSCAN COUNT (ignored for ids)
    4.. job ids
  Returns
    {next cursor ("0" at the end of a scan, "" for ids), slots freed}
]]
--- @include "includes/groupQueue"

local prefix = ARGV[1]
local ids = {}
local nextCursor = ""
if ARGV[2] ~= "" then
  local page = redis.call("HSCAN", KEYS[1], ARGV[2], "COUNT", tonumber(ARGV[3]) or 100)
  nextCursor = page[1]
  for i = 1, #page[2], 2 do
    ids[#ids + 1] = page[2][i]
  end
else
  for i = 4, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
end

local freed = 0
for _, jobId in ipairs(ids) do
  local gid = redis.call("HGET", KEYS[1], jobId)
  if gid then
    local jobKey = prefix .. jobId
    if redis.call("EXISTS", jobKey) == 0 or redis.call("HEXISTS", jobKey, "finishedOn") == 1 then
      redis.call("HDEL", KEYS[1], jobId)
      local base = groupBase(prefix, gid)
      redis.call("SREM", base .. ":active", jobId)
      markBusy(prefix, gid)
      freed = freed + 1
      if redis.call("HEXISTS", base, "paused") == 0 and redis.call("ZCARD", base .. ":wait") > 0 then
        enqueueGroup(KEYS[2], KEYS[3], gid)
      end
    end
  end
end
return { nextCursor, freed }
