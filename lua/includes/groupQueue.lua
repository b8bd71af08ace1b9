--[[
  Groups (EchoMQ extension, docs/groups.md): the per-group keys and putting a
  group (back) in the round robin.
  groupBase(prefix, gid) -> "{P}gr:g:<gid>"; its hash of settings, and
    base..":wait" (ZSET of unreleased job ids), base..":active" (SET of released,
    unfinished ids), base..":window" (ZSET release log of the rate limit).
  enqueueGroup(readyKey, seqKey, gid): adds the group at the back of the round
    robin unless it is already in it (its place is kept).
  markBusy(prefix, gid): sets the group's score in {P}gr:busy (built from {P},
    under the queue's hash tag) to its jobs — waiting + delayed + released and
    unfinished — or removes it at 0; the busiest groups are ZREVRANGE 0 N-1.
    Set from the sets' sizes, not incremented, so a call repairs any drift.
]]
local function groupBase(prefix, gid)
  return prefix .. "gr:g:" .. gid
end

local function enqueueGroup(readyKey, seqKey, gid)
  if not redis.call("ZSCORE", readyKey, gid) then
    redis.call("ZADD", readyKey, redis.call("INCR", seqKey), gid)
  end
end

local function markBusy(prefix, gid)
  local base = groupBase(prefix, gid)
  local n = redis.call("ZCARD", base .. ":wait") + redis.call("ZCARD", base .. ":delayed")
    + redis.call("SCARD", base .. ":active")
  if n > 0 then
    redis.call("ZADD", prefix .. "gr:busy", n, gid)
  else
    redis.call("ZREM", prefix .. "gr:busy", gid)
  end
end
