--[[
  H2: approximate trim of the events stream. Scripts that append uncapped
  entries call this first so that the stream stays bounded.
]]
--- @include "includes/getOrSetMaxEvents"

local function trimEvents(metaKey, eventsKey)
  local maxEvents = getOrSetMaxEvents(metaKey)
  redis.call("XTRIM", eventsKey, "MAXLEN", "~", maxEvents)
end
