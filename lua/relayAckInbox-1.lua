--[[
  relayAckInbox: record how far a node's reader has consumed its inbox
  (docs/protocol.md §Relay).

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
    3 cursor: id of the last entry consumed
  Returns
    1.
]]
local record = ARGV[1] .. ":" .. ARGV[2] .. ":node"
if redis.call("EXISTS", record) == 1 then
  redis.call("HSET", record, "cursor", ARGV[3])
end
return 1
