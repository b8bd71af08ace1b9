--[[
  relaySweep: drop nodes whose lease ran out (at most ARGV[2] of them) and
  retained messages past their expiry, then prune at most 100 subscriptions
  of dropped nodes, earlier calls' leftovers included. Any node may run it
  (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 most nodes to drop in this call
  Returns
    the ids of the nodes dropped.
]]
--- @include "includes/relaySubscriptions"
--- @include "includes/relayExpiry"

local base = ARGV[1]
local most = tonumber(ARGV[2])
local dropped = {}
if most <= 0 then
  return dropped
end

local now = relayNowMs()
local expired = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, most)
for i = 1, #expired do
  relayDropNode(base, KEYS[1], expired[i], now)
  dropped[i] = expired[i]
end
redis.call("ZREMRANGEBYSCORE", base .. ":retained", "-inf", now)
relayRefreshExpiry(base, KEYS[1], now)
relayPruneNodes(base, 100)
return dropped
