--[[
  relayGet: read-only views of a relay namespace for dashboards
  (docs/protocol.md §Relay). Lists are paged as the queue getters are:
  inclusive positions, an end of -1 for "to the end".

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 view: counts | used | nodes | subscriptions | patterns | retained
    3 start
    4 end
    5 subscriptions filter: "" (all) | node | pattern
    6 the filter's node id or pattern
  Returns, one array per row:
    counts         { nodes, subscriptions, patterns, retained }
    used           1 when a node is alive or a message retained, else 0
                   (one integer)
    nodes          { id, registered at, lease until, info, last heartbeat,
                     backlog, dropped, subscriptions } by registration (a
                     node expired but not swept yet has empty info)
    subscriptions  { node id, endpoint id, pattern }
    patterns       { pattern, subscriptions }
    retained       { topic, expires at, mid, ts, data } by expiry
]]
--- @include "includes/relaySubscriptions"
--- @include "includes/relayClock"

local base, view = ARGV[1], ARGV[2]
local first, last = tonumber(ARGV[3]), tonumber(ARGV[4])
local subsKey = base .. ":subs"
local retainedKey = base .. ":retained"

-- LIMIT offset and count of the inclusive window [first, last].
local function limit()
  if last < 0 then
    return first, -1
  end
  return first, math.max(0, last - first + 1)
end

local function count(prefix)
  local low, high = relayLex(prefix)
  return redis.call("ZLEXCOUNT", subsKey, low, high)
end

-- One page of a view's members, the view prefix cut off.
local function page(prefix)
  local offset, size = limit()
  if size == 0 then
    return {}
  end
  local low, high = relayLex(prefix)
  local found = redis.call("ZRANGEBYLEX", subsKey, low, high, "LIMIT", offset, size)
  for i = 1, #found do
    found[i] = string.sub(found[i], #prefix + 1)
  end
  return found
end

if view == "counts" then
  return { redis.call("ZCARD", KEYS[1]), count("n|"), count("t|"),
    redis.call("ZCOUNT", retainedKey, relayNowMs() + 1, "+inf") }
end

if view == "used" then
  local after = relayNowMs() + 1
  if redis.call("ZCOUNT", KEYS[1], after, "+inf") > 0 or
      redis.call("ZCOUNT", retainedKey, after, "+inf") > 0 then
    return 1
  end
  return 0
end

local rows = {}
if view == "nodes" then
  local started = redis.call("ZRANGE", base .. ":started", first, last, "WITHSCORES")
  for i = 1, #started, 2 do
    local node = started[i]
    local f = redis.call("HMGET", base .. ":" .. node .. ":node", "info", "hb", "backlog", "dropped")
    rows[#rows + 1] = { node, started[i + 1], redis.call("ZSCORE", KEYS[1], node) or "",
      f[1] or "", f[2] or "", f[3] or "0", f[4] or "0", count("n|" .. node .. "|") }
  end
elseif view == "subscriptions" then
  local filter, value = ARGV[5], ARGV[6]
  if filter == "node" then
    local found = page("n|" .. value .. "|")
    for i = 1, #found do
      local endpoint, pattern = relayCut(found[i])
      rows[#rows + 1] = { value, endpoint, pattern }
    end
  elseif filter == "pattern" then
    local found = page("p|" .. value .. "|")
    for i = 1, #found do
      local node, endpoint = relayCut(found[i])
      rows[#rows + 1] = { node, endpoint, value }
    end
  else
    local found = page("n|")
    for i = 1, #found do
      local node, rest = relayCut(found[i])
      local endpoint, pattern = relayCut(rest)
      rows[#rows + 1] = { node, endpoint, pattern }
    end
  end
elseif view == "patterns" then
  local found = page("t|")
  for i = 1, #found do
    rows[#rows + 1] = { found[i], count("p|" .. found[i] .. "|") }
  end
elseif view == "retained" then
  local offset, size = limit()
  if size ~= 0 then
    local topics = redis.call("ZRANGEBYSCORE", retainedKey, relayNowMs() + 1, "+inf",
      "WITHSCORES", "LIMIT", offset, size)
    for i = 1, #topics, 2 do
      local f = redis.call("HMGET", base .. ":" .. topics[i] .. ":ret", "m", "ts", "d")
      if f[1] then
        rows[#rows + 1] = { topics[i], topics[i + 1], f[1], f[2], f[3] }
      end
    end
  end
end
return rows
