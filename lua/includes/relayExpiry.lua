--[[
  Every key of a relay namespace expires by itself, so a namespace whose
  nodes all died leaves nothing behind even when no live node sweeps it:
  node records and inboxes carry their node's lease; the routing keys
  (nodes, started, subs, cleanup) the latest lease; :mid and :layout the
  later of the latest lease and the last retained expiry. Run after any
  change to the node set or to the retained messages.
]]

--- @include "includes/relayClock"

local function relayRefreshExpiry(base, nodesKey, now)
  local leaseEnd = relayTopScore(nodesKey)
  local routing = { nodesKey, base .. ":started", base .. ":subs", base .. ":cleanup" }
  if leaseEnd > now then
    for i = 1, #routing do
      redis.call("PEXPIREAT", routing[i], leaseEnd)
    end
  else
    -- No node is alive: whatever subscriptions remain are a dead node's.
    redis.call("UNLINK", unpack(routing))
  end
  local keepEnd = math.max(leaseEnd, relayTopScore(base .. ":retained"))
  if keepEnd > now then
    redis.call("PEXPIREAT", base .. ":mid", keepEnd)
    redis.call("PEXPIREAT", base .. ":layout", keepEnd)
  else
    redis.call("UNLINK", base .. ":mid", base .. ":layout")
  end
end
