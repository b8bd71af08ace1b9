--[[
  H23: Lua's unpack and Redis' argument lists both have limits, so commands
  with unbounded arguments are issued in chunks. Yields (from, to) indexes.
]]
local function batches(n, size)
  local from = 1
  return function()
    if from > n then
      return nil
    end
    local to = math.min(from + size - 1, n)
    local start = from
    from = to + 1
    return start, to
  end
end
