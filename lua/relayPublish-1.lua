--[[
  relayPublish: publish a message on a topic (docs/protocol.md §Relay).
  Every subscription whose pattern selects the topic is found; each live
  node concerned gets one inbox entry naming its matching endpoints, each
  endpoint once however many of its patterns match. With a retention the
  message also becomes the topic's retained message.

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 topic
    3 data (serialised by the caller)
    4 timestamp, ms
    5 retain, ms (0: not retained)
    6 max data size, bytes
    7 inbox max length, for nodes that recorded none
  Returns
    { mid, nodes reached, endpoints reached }; -1 invalid topic; -4 data
    too large.
]]
--- @include "includes/relaySubscriptions"
--- @include "includes/relayExpiry"

local base, topic, data, ts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local retain = tonumber(ARGV[5])
local subsKey = base .. ":subs"

local words = relaySegments(topic, false)
if not words then
  return -1
end
if #data > tonumber(ARGV[6]) then
  return -4
end

local midKey = base .. ":mid"
local mid
if redis.call("EXISTS", midKey) == 1 then
  mid = redis.call("INCR", midKey)
else
  -- A counter created anew starts at the server time in microseconds: ids
  -- keep growing across a counter that expired with an idle namespace.
  local t = redis.call("TIME")
  mid = redis.call("INCRBY", midKey, t[1] .. string.format("%06d", tonumber(t[2])))
  redis.call("PEXPIRE", midKey, math.max(1, redis.call("PTTL", KEYS[1])))
end

if retain > 0 then
  local now = relayNowMs()
  local keptKey = base .. ":" .. topic .. ":ret"
  redis.call("HSET", keptKey, "m", mid, "ts", ts, "d", data)
  redis.call("PEXPIRE", keptKey, retain)
  local indexKey = base .. ":retained"
  redis.call("ZADD", indexKey, now + retain, topic)
  redis.call("ZREMRANGEBYSCORE", indexKey, "-inf", now)
  redis.call("PEXPIREAT", indexKey, relayTopScore(indexKey))
  relayRefreshExpiry(base, KEYS[1], now)
end

-- node -> { endpoints in order, endpoint -> true }, nodes in first-seen order
local byNode = {}
local nodes = {}

local function collect(pattern)
  local prefix = "p|" .. pattern .. "|"
  local low, high = relayLex(prefix)
  local found = redis.call("ZRANGEBYLEX", subsKey, low, high)
  for i = 1, #found do
    local node, endpoint = relayCut(string.sub(found[i], #prefix + 1))
    local target = byNode[node]
    if target == nil then
      target = { list = {}, has = {} }
      byNode[node] = target
      nodes[#nodes + 1] = node
    end
    if not target.has[endpoint] then
      target.has[endpoint] = true
      target.list[#target.list + 1] = endpoint
    end
  end
end

-- The wildcard patterns filed under one root, each tested against the topic.
local function collectWildcards(root)
  local prefix = "w|" .. root .. "|"
  local low, high = relayLex(prefix)
  local found = redis.call("ZRANGEBYLEX", subsKey, low, high)
  for i = 1, #found do
    local pattern = string.sub(found[i], #prefix + 1)
    local parts = relaySegments(pattern, true)
    if parts and relayMatches(parts, words) then
      collect(pattern)
    end
  end
end

collect(topic)
collectWildcards(words[1])
collectWildcards("*")

local fallbackMax = tonumber(ARGV[7])
local reachedNodes, reachedEndpoints = 0, 0
for i = 1, #nodes do
  local node = nodes[i]
  local record = base .. ":" .. node .. ":node"
  -- An inbox lives exactly as long as its node's record.
  local ttl = redis.call("PTTL", record)
  if ttl > 0 then
    local inbox = base .. ":" .. node .. ":inbox"
    local endpoints = byNode[node].list
    local cap = tonumber(redis.call("HGET", record, "maxLen")) or fallbackMax
    local excess = redis.call("XLEN", inbox) + 1 - cap
    if excess > 0 then
      -- Entries the reader already took are not counted as dropped.
      local cursor = redis.call("HGET", record, "inFlight") or
        redis.call("HGET", record, "cursor") or "0-0"
      local taken = 0
      if cursor ~= "0-0" and cursor ~= "0" then
        taken = #redis.call("XRANGE", inbox, "-", cursor, "COUNT", excess)
      end
      local unread = redis.call("XTRIM", inbox, "MAXLEN", cap - 1) - taken
      if unread > 0 then
        redis.call("HINCRBY", record, "dropped", unread)
      end
    end
    redis.call("XADD", inbox, "*", "k", "msg", "t", topic, "m", mid, "ts", ts, "d", data,
      "e", table.concat(endpoints, ","))
    redis.call("PEXPIRE", inbox, ttl)
    reachedNodes = reachedNodes + 1
    reachedEndpoints = reachedEndpoints + #endpoints
  end
end

return { mid, reachedNodes, reachedEndpoints }
