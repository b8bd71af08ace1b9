--[[
  relayTouchNamespace: note in the prefix's registry that a namespace is in
  use until now + ARGV[2] (dashboards find namespaces there). Entries and
  the registry expire by themselves. The registry is outside the
  namespace's hash tag, hence a call of its own (docs/protocol.md §Relay).

  KEYS
    1 registry <prefix>::relay:namespaces
  ARGV
    1 namespace
    2 in use for, ms
  Returns
    nil.
]]
--- @include "includes/relayClock"

local now = relayNowMs()
redis.call("ZADD", KEYS[1], "GT", now + tonumber(ARGV[2]), ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
redis.call("PEXPIREAT", KEYS[1], relayTopScore(KEYS[1]))
