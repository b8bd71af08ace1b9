--[[
  The clock of a gated DAG write's deadline: Redis's own (TIME, ms), so a
  writer's lease and a repair's look at it agree whatever the hosts' clocks.
]]
local function dagNowMs()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
