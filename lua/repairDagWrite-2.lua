--[[
  repairDagWrite (EchoMQ extension, DAG flows, docs/flows.md §DAGs): ends a
  gated DAG write whose writer stopped renewing its gate (dagGate-2) past
  the deadline, at most ARGV[1] nodes per call. Called by the DagReleaser of
  the gate's home queue on each sweep (any number of callers: each pops its
  own nodes).
    state "writing", deadline passed  -> "rollback": the write is abandoned
        half-way; each node of the write's list is deleted (hash,
        :dependencies, :processed, :failed, :unsuccessful, :dag:parents,
        :logs, its waiting-children entry and dag:pending id). Every node of
        the list is in waiting-children, held by a dependency or by the gate,
        and every node it waits for or that waits for it is in the same list
        (nodes are written dependents first), so nothing outside the write is
        left pointing at a deleted node.
    state "lifting", deadline passed  -> "finishing": every node was written;
        the gate member is lifted from each node's :dependencies, and a node
        left without dependencies goes to wait (moveParentToWait: delay,
        priority), as the writer would have.
    a live deadline: nothing (-1).
  A node of the list that is no longer in its queue's waiting-children (a
  job taken meanwhile by another producer) is left alone.

  KEYS
    1 {H}dag:gate:<uuid>   2 {H}dag:gates
  ARGV
    1 most nodes per call
  Returns the nodes left on the list (0: the write is ended: gate, list and
  registry entry deleted), or -1 (the writer's deadline has not passed).
  Events: `waiting`/`delayed` of each node lifted to wait.
]]
--- @include "includes/dagClock"
--- @include "includes/moveParentToWait"

local gate, registry = KEYS[1], KEYS[2]
local nodesKey = gate .. ":nodes"
local budget = tonumber(ARGV[1]) or 1
if budget < 1 then
  budget = 1
end

local fields = redis.call("HMGET", gate, "state", "deadline")
local state = fields[1]
if not state then
  redis.call("DEL", nodesKey)
  redis.call("ZREM", registry, gate)
  return 0
end
local now = dagNowMs()
if (state == "writing" or state == "lifting") and tonumber(fields[2] or 0) > now then
  return -1
end
if state == "writing" then
  state = "rollback"
  redis.call("HSET", gate, "state", state, "owner", "")
elseif state == "lifting" then
  state = "finishing"
  redis.call("HSET", gate, "state", state, "owner", "")
end

local nodes = redis.call("LRANGE", nodesKey, 0, budget - 1)
for _, nodeKey in ipairs(nodes) do
  -- Node ids hold no ':' (add_dag refuses them): the queue prefix is the rest.
  local prefix, id = string.match(nodeKey, "^(.*:)([^:]+)$")
  if prefix then
    if state == "rollback" then
      if redis.call("ZREM", prefix .. "waiting-children", id) == 1 then
        redis.call("DEL", nodeKey, nodeKey .. ":dependencies", nodeKey .. ":processed",
          nodeKey .. ":failed", nodeKey .. ":unsuccessful", nodeKey .. ":dag:parents",
          nodeKey .. ":logs")
        redis.call("SREM", prefix .. "dag:pending", id)
      end
    elseif state == "finishing" then
      local deps = nodeKey .. ":dependencies"
      if redis.call("SREM", deps, gate) == 1 and redis.call("SCARD", deps) == 0
          and redis.call("ZREM", prefix .. "waiting-children", id) == 1 then
        moveParentToWait(prefix, id, true, now)
      end
    end
  end
end
redis.call("LTRIM", nodesKey, #nodes, -1)
local left = redis.call("LLEN", nodesKey)
if left == 0 then
  redis.call("DEL", gate)
  redis.call("ZREM", registry, gate)
end
return left
