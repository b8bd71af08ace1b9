--[[
  relayRemoveEndpoint: every subscription of one endpoint of a node
  (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
    3 endpoint id
  Returns
    how many subscriptions were removed.
]]
--- @include "includes/relaySubscriptions"

return relayDropEndpoint(ARGV[1], ARGV[2], ARGV[3])
