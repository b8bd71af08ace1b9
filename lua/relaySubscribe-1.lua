--[[
  relaySubscribe: subscribe one endpoint of a node to a pattern. For an
  exact topic (no wildcard) the topic's retained message is read in the same
  call, so nothing published can fall between the two (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
    3 endpoint id
    4 pattern
  Returns
    { added (1 new, 0 already there), retained mid, retained ts, retained
    data } with "" for each retained field when there is none;
    -2 invalid pattern; -3 node not registered; -5 invalid id.
]]
--- @include "includes/relayGrammar"

local base, node, endpoint, pattern = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if not (relayIsId(node) and relayIsId(endpoint)) then
  return -5
end
local parts = relaySegments(pattern, true)
if not parts then
  return -2
end
if not redis.call("ZSCORE", KEYS[1], node) or
    redis.call("EXISTS", base .. ":" .. node .. ":node") == 0 then
  return -3
end

local subsKey = base .. ":subs"
local wildcard = relayIsWildcard(parts)
local added = redis.call("ZADD", subsKey, 0, "n|" .. node .. "|" .. endpoint .. "|" .. pattern)
if added == 1 then
  redis.call("ZADD", subsKey, 0, "p|" .. pattern .. "|" .. node .. "|" .. endpoint,
    0, "t|" .. pattern)
  -- Exact topics are looked up directly on publish; only wildcard patterns
  -- need the per-root list.
  if wildcard then
    redis.call("ZADD", subsKey, 0, "w|" .. relayRoot(parts) .. "|" .. pattern)
  end
  -- A fresh index lives as long as the namespace's other routing keys.
  if redis.call("PTTL", subsKey) == -1 then
    redis.call("PEXPIRE", subsKey, math.max(1, redis.call("PTTL", KEYS[1])))
  end
end

if not wildcard then
  local kept = redis.call("HMGET", base .. ":" .. pattern .. ":ret", "m", "ts", "d")
  if kept[1] then
    return { added, kept[1], kept[2], kept[3] }
  end
end
return { added, "", "", "" }
