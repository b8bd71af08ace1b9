--[[
  H21 every-next-millis: the slot of the next iteration of an "every"
  scheduler, and the phase (offset) that keeps later slots aligned.
  everyNextMillis(prevMillis, every, now, offset, startDate) -> nextMillis, offset
    prevMillis  millis of the current iteration, or nil for a first creation
    offset      the stored/user phase (number, string or nil)
  Both results are floored: they become part of a job id.
]]
local function everyNextMillis(prevMillis, every, now, offset, startDate)
  offset = tonumber(offset)
  local nextMillis
  if prevMillis == nil then
    if startDate then
      nextMillis = math.max(tonumber(startDate), now)
    elseif offset ~= nil and offset > 0 then
      nextMillis = math.floor(now / every) * every + offset
      if nextMillis <= now then
        nextMillis = nextMillis + every
      end
    else
      -- No phase asked for: the first iteration runs at once and defines it.
      nextMillis = now
    end
  else
    nextMillis = prevMillis + every
    if nextMillis < now then
      -- Behind schedule (the worker was down): skip the missed slots instead
      -- of replaying them, and stay on the scheduler's phase.
      local aligned = math.floor(now / every) * every + (offset or 0)
      if aligned <= now then
        nextMillis = aligned + every
      else
        nextMillis = aligned
      end
    end
  end
  if offset == nil or offset == 0 then
    offset = nextMillis - math.floor(nextMillis / every) * every
  end
  return math.floor(nextMillis), math.floor(offset)
end
