--[[
  relayDeleteRetained: forget the retained message of a topic
  (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 topic
  Returns
    1 deleted, 0 the topic had none, -1 invalid topic.
]]
--- @include "includes/relayGrammar"
--- @include "includes/relayExpiry"

local base, topic = ARGV[1], ARGV[2]
if not relaySegments(topic, false) then
  return -1
end

local now = relayNowMs()
local indexKey = base .. ":retained"
redis.call("ZREM", indexKey, topic)
redis.call("ZREMRANGEBYSCORE", indexKey, "-inf", now)
-- The topic may have been the one kept longest: the index (and below, the
-- namespace) now ends with the retained messages left.
local indexEnd = relayTopScore(indexKey)
if indexEnd > 0 then
  redis.call("PEXPIREAT", indexKey, indexEnd)
end
local deleted = redis.call("DEL", base .. ":" .. topic .. ":ret")
relayRefreshExpiry(base, KEYS[1], now)
return deleted
