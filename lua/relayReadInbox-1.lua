--[[
  relayReadInbox: read the next batch of a node's inbox and mark it in
  flight in the same call, so a publisher trimming the inbox meanwhile does
  not count those entries as dropped (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
    3 cursor: id of the last entry consumed
    4 most entries
  Returns
    XREAD's reply, or nil when nothing is there or the node's lease ran out.
]]
local record = ARGV[1] .. ":" .. ARGV[2] .. ":node"
if redis.call("EXISTS", record) == 0 then
  return nil
end

local batch = redis.call("XREAD", "COUNT", ARGV[4], "STREAMS",
  ARGV[1] .. ":" .. ARGV[2] .. ":inbox", ARGV[3])
local inFlight = ARGV[3]
if batch then
  local entries = batch[1][2]
  inFlight = entries[#entries][1]
end
redis.call("HSET", record, "cursor", ARGV[3], "inFlight", inFlight)
return batch
