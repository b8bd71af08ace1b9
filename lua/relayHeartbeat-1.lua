--[[
  relayHeartbeat: renew a live node's lease, and with it the expiry of its
  record, its inbox and the namespace (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
    3 lease, ms
  Returns
    1 renewed; 0 the node is unknown or its lease ran out (swept or not): it
    must register again and restore its subscriptions.
]]
--- @include "includes/relayExpiry"

local base, node = ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3])
local record = base .. ":" .. node .. ":node"

if not redis.call("ZSCORE", KEYS[1], node) or redis.call("EXISTS", record) == 0 then
  return 0
end

local now = relayNowMs()
redis.call("ZADD", KEYS[1], now + lease, node)
redis.call("HSET", record, "hb", now)
redis.call("PEXPIRE", record, lease)
redis.call("PEXPIRE", base .. ":" .. node .. ":inbox", lease)
relayRefreshExpiry(base, KEYS[1], now)
return 1
