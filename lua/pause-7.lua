--[[
  pause: pause or resume the queue (docs/protocol.md §Scripts).

  KEYS     pause                resume
  KEYS[1]  {P}wait              {P}paused
  KEYS[2]  {P}paused            {P}wait
  KEYS[3]  {P}meta              {P}meta
  KEYS[4]  {P}prioritized       {P}prioritized
  KEYS[5]  {P}events            {P}events
  KEYS[6]  {P}delayed           {P}delayed
  KEYS[7]  {P}marker            {P}marker
  ARGV[1] "paused" or "resumed"
  ARGV[2] "1" to emit the event, "0" not to

  Returns the number of ids still left in the legacy paused list (0 unless a
  BullMQ <= 5 queue is being resumed; the client calls again until 0).
  Event: uncapped `paused` / `resumed` with no other field.
]]
local rcall = redis.call

--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/batches"

local markerKey = KEYS[7]
local remaining = 0

if ARGV[1] == "paused" then
  -- Jobs stay in wait; dropping the marker is what keeps workers idle.
  rcall("HSET", KEYS[3], "paused", 1)
  rcall("DEL", markerKey)
else
  rcall("HDEL", KEYS[3], "paused")

  local legacyPausedKey = KEYS[1]
  local waitKey = KEYS[2]
  -- BullMQ <= 5 parked the waiting jobs in `paused`; move them back, in
  -- chunks so that a huge list does not block Redis in one call.
  if rcall("EXISTS", legacyPausedKey) == 1 then
    if rcall("EXISTS", waitKey) == 0 then
      rcall("RENAME", legacyPausedKey, waitKey)
    else
      local jobIds = rcall("LRANGE", legacyPausedKey, 0, 6999)
      for from, to in batches(#jobIds, 7000) do
        rcall("RPUSH", waitKey, unpack(jobIds, from, to))
      end
      rcall("LTRIM", legacyPausedKey, #jobIds, -1)
      remaining = rcall("LLEN", legacyPausedKey)
    end
  end

  if rcall("LLEN", waitKey) + rcall("ZCARD", KEYS[4]) > 0 then
    rcall("ZADD", markerKey, 0, "0")
  else
    addDelayMarkerIfNeeded(markerKey, KEYS[6])
  end
end

if ARGV[2] ~= "0" then
  rcall("XADD", KEYS[5], "*", "event", ARGV[1])
end

return remaining
