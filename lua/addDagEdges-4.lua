--[[
  addDagEdges (EchoMQ extension, DAG flows, docs/flows.md §DAGs): one DAG
  node's extension writes, run by FlowProducer::add_dag right after the
  node's add script in the same MULTI/EXEC:
    * for each extra parent (a dependent after the node's first, which
      BullMQ's `parentKey` names): the node's key into the parent's
      `:dependencies`, the parent into the node's `:dag:parents`, the node's
      id into its queue's `dag:pending`;
    * in a DAG written in several chunks (a "gated" write, docs/flows.md
      §DAGs): the node's key onto the write's node list (what a repair of an
      abandoned write rolls back or lifts), and, for a node without
      dependencies (mode "root"), the gate in its own `:dependencies`, so
      that it waits in waiting-children until the gate is lifted.
  Everything is checked before anything is written: the node exists, each
  parent is another existing job of the queue its queue key names, at most
  100 parents per call (the caller calls again for more), a gated write's
  gate is open ("writing") — so a call writes all of its edges or none.

  KEYS
    1 {P}<id>              the node's hash (just added)
    2 {P}<id>:dag:parents  HASH extra parent key -> its queue key
    3 {P}dag:pending       SET of the queue's nodes not handed over yet
    4 {H}dag:gate:<uuid>   the gated write's gate (HASH: owner, state,
                           deadline); ignored in mode ""
  ARGV
    1 node id
    2 mode: "" (a one-transaction DAG), "node" or "root" (a gated write)
    3.. extra parent key, its queue key (<prefix>:<queue>), … (at most 100 pairs)
  Returns the number of extra edges written.
  Errors (nothing written): "ERR addDagEdges: …".
]]
local nodeKey = KEYS[1]
local mode = ARGV[2]
local count = (#ARGV - 2) / 2

local function refuse(why)
  return redis.error_reply("ERR addDagEdges: " .. why)
end

if count ~= math.floor(count) then
  return refuse("parents come in pairs (key, queue key)")
end
if count > 100 then
  return refuse("at most 100 parents per call")
end
if mode ~= "" and mode ~= "node" and mode ~= "root" then
  return refuse("unknown mode " .. mode)
end
if redis.call("EXISTS", nodeKey) ~= 1 then
  return refuse("node " .. nodeKey .. " does not exist")
end
if mode ~= "" and redis.call("HGET", KEYS[4], "state") ~= "writing" then
  return refuse("the gate " .. KEYS[4] .. " is not open for writing")
end
for i = 3, #ARGV, 2 do
  local parentKey = ARGV[i]
  local prefix = ARGV[i + 1] .. ":"
  if parentKey == nodeKey then
    return refuse("a node cannot wait for itself")
  end
  if string.sub(parentKey, 1, #prefix) ~= prefix or #parentKey == #prefix
      or string.find(parentKey, ":", #prefix + 1, true) then
    return refuse("parent " .. parentKey .. " is no job key of queue " .. ARGV[i + 1])
  end
  if redis.call("EXISTS", parentKey) ~= 1 then
    return refuse("parent " .. parentKey .. " does not exist")
  end
end

local written = 0
for i = 3, #ARGV, 2 do
  redis.call("SADD", ARGV[i] .. ":dependencies", nodeKey)
  written = written + redis.call("HSET", KEYS[2], ARGV[i], ARGV[i + 1])
end
if count > 0 then
  redis.call("SADD", KEYS[3], ARGV[1])
end
if mode ~= "" then
  redis.call("RPUSH", KEYS[4] .. ":nodes", nodeKey)
  if mode == "root" then
    redis.call("SADD", nodeKey .. ":dependencies", KEYS[4])
  end
end
return written
