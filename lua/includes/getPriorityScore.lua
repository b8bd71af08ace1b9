--[[
  H6: priority in the high bits, an insertion counter in the low 32 bits so
  that jobs of equal priority run in insertion order.
]]
local function getPriorityScore(priority, priorityCounterKey)
  local counter = redis.call("INCR", priorityCounterKey)
  return tonumber(priority) * 0x100000000 + counter % 0x100000000
end
