--[[
  Groups (EchoMQ extension, docs/groups.md): the per-group keys and putting a
  group (back) in the round robin.
  groupBase(prefix, gid) -> "{P}gr:g:<gid>"; its hash of settings, and
    base..":wait" (ZSET of unreleased job ids), base..":active" (SET of released,
    unfinished ids), base..":window" (ZSET release log of the rate limit).
  enqueueGroup(readyKey, seqKey, gid): adds the group at the back of the round
    robin unless it is already in it (its place is kept).
]]
local function groupBase(prefix, gid)
  return prefix .. "gr:g:" .. gid
end

local function enqueueGroup(readyKey, seqKey, gid)
  if not redis.call("ZSCORE", readyKey, gid) then
    redis.call("ZADD", readyKey, redis.call("INCR", seqKey), gid)
  end
end
