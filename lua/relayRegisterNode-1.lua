--[[
  relayRegisterNode: register a relay node, or refresh a live one: its lease,
  its info and its inbox cap (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes          (base = <prefix>::relay:{<namespace>})
  ARGV
    1 base
    2 node id
    3 lease, ms
    4 node info, JSON (stored as is)
    5 layout version of the caller
    6 inbox max length
  Returns
    1 registered; 0 the id's old subscriptions are still being pruned (call
    again); -5 invalid id; -6 the namespace holds another layout version.
]]
--- @include "includes/relaySubscriptions"
--- @include "includes/relayExpiry"

local base, node = ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3])
local record = base .. ":" .. node .. ":node"

if not relayIsId(node) then
  return -5
end
local layout = redis.call("HGET", base .. ":layout", "layout")
if layout and layout ~= ARGV[5] then
  return -6
end

local now = relayNowMs()
-- An id without a live record is a new node: whatever routes an earlier
-- node of that id left are dropped first, at most 100 per call, so a
-- recovering node never inherits stale ones.
if redis.call("EXISTS", record) == 0 then
  relayDropNode(base, KEYS[1], node, now)
  relayRefreshExpiry(base, KEYS[1], now)
  relayPruneNode(base, node, 100)
  if redis.call("ZSCORE", base .. ":cleanup", node) then
    return 0
  end
end

redis.call("HSET", base .. ":layout", "layout", ARGV[5])
redis.call("ZADD", KEYS[1], now + lease, node)
redis.call("ZADD", base .. ":started", "NX", now, node)
redis.call("HSET", record, "info", ARGV[4], "hb", now, "maxLen", tonumber(ARGV[6]) or 10000)
redis.call("PEXPIRE", record, lease)
redis.call("PEXPIRE", base .. ":" .. node .. ":inbox", lease)
relayRefreshExpiry(base, KEYS[1], now)
return 1
