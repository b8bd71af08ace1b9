--[[
  getGroups: EchoMQ extension (docs/groups.md), read-only. One group, or a
  page of the known groups in id order.

  KEYS
    1 {P}gr:index
  ARGV
    1 {P}
    2 mode: "one" (ARGV 3 = group id), "page" (ARGV 3 = start, ARGV 4 =
      count, at most 1000) or "busy" (ARGV 3 = count, at most 1000: the groups
      with the most released-and-unfinished jobs, from {P}gr:busy)
  Returns
    {total groups, {gid, waiting, active, paused, concurrency, max, duration,
    maxSize, delayed}, …}; settings are "" when unset; "one" answers the row even for a
    group that has nothing.
]]
local prefix = ARGV[1]
local gids
if ARGV[2] == "one" then
  gids = { ARGV[3] }
elseif ARGV[2] == "busy" then
  local count = math.min(tonumber(ARGV[3]) or 10, 1000)
  gids = {}
  if count > 0 then
    gids = redis.call("ZREVRANGE", prefix .. "gr:busy", 0, count - 1)
  end
else
  local start = tonumber(ARGV[3]) or 0
  local count = math.min(tonumber(ARGV[4]) or 100, 1000)
  if count <= 0 then
    gids = {}
  else
    gids = redis.call("ZRANGE", KEYS[1], start, start + count - 1)
  end
end
local out = { redis.call("ZCARD", KEYS[1]) }
for _, gid in ipairs(gids) do
  local base = prefix .. "gr:g:" .. gid
  local s = redis.call("HMGET", base, "paused", "concurrency", "max", "duration", "maxSize")
  out[#out + 1] = { gid, redis.call("ZCARD", base .. ":wait"), redis.call("SCARD", base .. ":active"),
    s[1] and 1 or 0, s[2] or "", s[3] or "", s[4] or "", s[5] or "", redis.call("ZCARD", base .. ":delayed") }
end
return out
