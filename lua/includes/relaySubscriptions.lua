--[[
  The subscription index of a relay namespace and the removal of nodes.

  {base}:subs is one sorted set, every member at score 0, so it is ordered
  and paged by member. Four views share it ("|" is in no id nor topic, so a
  member prefix selects one view):
    n|<node>|<endpoint>|<pattern>   what a node (or endpoint) subscribes to
    p|<pattern>|<node>|<endpoint>   who subscribes to a pattern
    t|<pattern>                     every pattern with a subscriber
    w|<root>|<pattern>              wildcard patterns by first segment ("*"
                                    when that is a wildcard)
]]

--- @include "includes/relayGrammar"

-- Inclusive ZRANGEBYLEX bounds of the members that start with `prefix`.
local function relayLex(prefix)
  return "[" .. prefix, "[" .. prefix .. "\255"
end

local function relayAnyWith(subsKey, prefix)
  local low, high = relayLex(prefix)
  return #redis.call("ZRANGEBYLEX", subsKey, low, high, "LIMIT", 0, 1) > 0
end

-- "<a>|<rest>" -> a, rest
local function relayCut(text)
  local bar = string.find(text, "|", 1, true)
  return string.sub(text, 1, bar - 1), string.sub(text, bar + 1)
end

-- Drops one subscription, and the pattern's own entries with its last
-- subscriber. 1 when the subscription was there.
local function relayUnsubscribe(base, node, endpoint, pattern)
  local subsKey = base .. ":subs"
  local gone = redis.call("ZREM", subsKey,
    "n|" .. node .. "|" .. endpoint .. "|" .. pattern,
    "p|" .. pattern .. "|" .. node .. "|" .. endpoint)
  if not relayAnyWith(subsKey, "p|" .. pattern .. "|") then
    redis.call("ZREM", subsKey, "t|" .. pattern)
    local parts = relaySegments(pattern, true)
    if parts and relayIsWildcard(parts) then
      redis.call("ZREM", subsKey, "w|" .. relayRoot(parts) .. "|" .. pattern)
    end
  end
  if gone > 0 then
    return 1
  end
  return 0
end

-- Drops every subscription of one endpoint; answers how many.
local function relayDropEndpoint(base, node, endpoint)
  local prefix = "n|" .. node .. "|" .. endpoint .. "|"
  local low, high = relayLex(prefix)
  local found = redis.call("ZRANGEBYLEX", base .. ":subs", low, high)
  for i = 1, #found do
    relayUnsubscribe(base, node, endpoint, string.sub(found[i], #prefix + 1))
  end
  return #found
end

-- Takes a node out of routing at once: lease, registration, record and
-- inbox go now; its subscriptions are listed in {base}:cleanup and pruned a
-- bounded number per call. Answers ZREM's count on the lease set.
local function relayDropNode(base, nodesKey, node, now)
  local gone = redis.call("ZREM", nodesKey, node)
  redis.call("ZREM", base .. ":started", node)
  redis.call("UNLINK", base .. ":" .. node .. ":inbox", base .. ":" .. node .. ":node")
  if relayAnyWith(base .. ":subs", "n|" .. node .. "|") then
    redis.call("ZADD", base .. ":cleanup", now, node)
  end
  return gone
end

-- Removes up to `budget` subscriptions of a dropped node and answers the
-- budget left; a call always spends at least 1, so loops end.
local function relayPruneNode(base, node, budget)
  local prefix = "n|" .. node .. "|"
  local low, high = relayLex(prefix)
  local found = redis.call("ZRANGEBYLEX", base .. ":subs", low, high, "LIMIT", 0, budget)
  for i = 1, #found do
    local endpoint, pattern = relayCut(string.sub(found[i], #prefix + 1))
    relayUnsubscribe(base, node, endpoint, pattern)
  end
  if #found < budget then
    redis.call("ZREM", base .. ":cleanup", node)
  end
  return budget - math.max(1, #found)
end

-- Prunes dropped nodes, oldest first, within one shared budget.
local function relayPruneNodes(base, budget)
  while budget > 0 do
    local oldest = redis.call("ZRANGE", base .. ":cleanup", 0, 0)
    if not oldest[1] then
      return
    end
    budget = relayPruneNode(base, oldest[1], budget)
  end
end
