--[[
  relayUnregisterNode: a node leaving cleanly. Its record and inbox go at
  once; at most 100 subscriptions are pruned here, later sweeps (or the
  namespace's expiry, for the last node) do the rest (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
  Returns
    1 removed, 0 it was not registered.
]]
--- @include "includes/relaySubscriptions"
--- @include "includes/relayExpiry"

local now = relayNowMs()
local gone = relayDropNode(ARGV[1], KEYS[1], ARGV[2], now)
relayRefreshExpiry(ARGV[1], KEYS[1], now)
relayPruneNodes(ARGV[1], 100)
return gone
