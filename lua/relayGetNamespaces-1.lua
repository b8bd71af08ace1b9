--[[
  relayGetNamespaces: the relay namespaces of a prefix that may be in use,
  sorted by name. An entry can outlive its namespace's last node or
  retained message, so callers confirm each one (relayGet "used")
  (docs/protocol.md §Relay).

  KEYS
    1 registry <prefix>::relay:namespaces
  Returns
    the namespace names.
]]
--- @include "includes/relayClock"

local names = redis.call("ZRANGEBYSCORE", KEYS[1], relayNowMs() + 1, "+inf")
table.sort(names)
return names
