--[[
  relayTrimInbox: delete the consumed entries of a node's inbox (up to the
  reader's cursor, at most 10000 per call) and the oldest ones past the max
  length; record the backlog and the entries dropped unread on the node
  (docs/protocol.md §Relay). Entries of a batch in flight were delivered, so
  they are not counted as dropped.

  KEYS
    1 {base}:nodes
  ARGV
    1 base
    2 node id
    3 cursor: id of the last entry consumed ("0-0": none)
    4 max length
  Returns
    the entries left: what the node has not read yet.
]]
--- @include "includes/batches"

local inbox = ARGV[1] .. ":" .. ARGV[2] .. ":inbox"
local record = ARGV[1] .. ":" .. ARGV[2] .. ":node"
local cursor = ARGV[3]
local live = redis.call("EXISTS", record) == 1

if live then
  redis.call("HSET", record, "cursor", cursor)
end

if cursor ~= "0-0" and cursor ~= "0" then
  local consumed = redis.call("XRANGE", inbox, "-", cursor, "COUNT", 10000)
  if #consumed > 0 then
    local ids = {}
    for i = 1, #consumed do
      ids[i] = consumed[i][1]
    end
    for from, to in batches(#ids, 7000) do
      redis.call("XDEL", inbox, unpack(ids, from, to))
    end
  end
end

local cap = tonumber(ARGV[4])
local dropped = 0
local excess = redis.call("XLEN", inbox) - cap
if excess > 0 then
  local inFlight = redis.call("HGET", record, "inFlight") or cursor
  local taken = 0
  if inFlight ~= "0-0" and inFlight ~= "0" then
    taken = #redis.call("XRANGE", inbox, "-", inFlight, "COUNT", excess)
  end
  dropped = redis.call("XTRIM", inbox, "MAXLEN", cap) - taken
end
local backlog = redis.call("XLEN", inbox)
-- Only a live node has a record: a write to a missing one would create it
-- with no expiry.
if live then
  redis.call("HSET", record, "backlog", backlog)
  if dropped > 0 then
    redis.call("HINCRBY", record, "dropped", dropped)
  end
end
return backlog
