--[[
  dagGate (EchoMQ extension, DAG flows, docs/flows.md §DAGs): the owner's
  side of a gated DAG write (a DAG written in several transactions). The
  gate is a HASH {owner, state, deadline}; its key is the member that holds
  the DAG's nodes without dependencies in waiting-children; the registry
  (one per home queue, the queue of the DAG's first node without
  dependencies) lists open gates by deadline, for the repair
  (repairDagWrite-2) of a write whose writer died.

  KEYS
    1 {H}dag:gate:<uuid>   the gate       2 {H}dag:gates   ZSET gate -> deadline (ms)
  ARGV
    1 op: "open" | "renew" | "lifting" | "close"
    2 owner (the writer's token)
    3 lease (ms): the deadline is Redis's TIME + lease (open, renew, lifting)
  Ops
    open     a new gate, state "writing" (refused when the key exists)
    renew    push the deadline on (state kept: "writing" or "lifting")
    lifting  every node is written: from now a repair lifts, never rolls back
    close    every gate member is lifted: the gate, its node list and its
             registry entry are deleted
  Every op but open checks the owner and a live state: a write that a
  repair took over (state "rollback" or "finishing", or the gate gone) gets
  "ERR dagGate: taken over" and must stop.
  Returns the new deadline (ms; 0 for close).
]]
--- @include "includes/dagClock"

local gate, registry = KEYS[1], KEYS[2]
local op, owner = ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3]) or 0
if lease < 1 then
  lease = 1
end

if op == "open" then
  if redis.call("EXISTS", gate) == 1 then
    return redis.error_reply("ERR dagGate: gate exists")
  end
  local deadline = dagNowMs() + lease
  redis.call("HSET", gate, "owner", owner, "state", "writing", "deadline", deadline)
  redis.call("ZADD", registry, deadline, gate)
  return deadline
end

local fields = redis.call("HMGET", gate, "owner", "state")
if fields[1] ~= owner or (fields[2] ~= "writing" and fields[2] ~= "lifting") then
  return redis.error_reply("ERR dagGate: taken over")
end
if op == "close" then
  redis.call("DEL", gate, gate .. ":nodes")
  redis.call("ZREM", registry, gate)
  return 0
end
local state = fields[2]
if op == "lifting" then
  state = "lifting"
elseif op ~= "renew" then
  return redis.error_reply("ERR dagGate: unknown op " .. tostring(op))
end
local deadline = dagNowMs() + lease
redis.call("HSET", gate, "state", state, "deadline", deadline)
redis.call("ZADD", registry, deadline, gate)
return deadline
