--[[
  auditFlows: EchoMQ extension, read-only. The flow invariants of a queue's
  parents, checked in one atomic read (docs/flows.md §Audit):
    F1  a parent in waiting-children has at least one pending dependency
        (otherwise nothing will ever move it on)
    F2  every pending dependency of such a parent is an existing job hash

  KEYS
    1 {P}waiting-children
  ARGV
    1 {P}   2 most parents to look at
  Returns
    a flat list of violations: check, parent id, detail, ...
]]
local out = {}
local parents = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[2]) - 1)
for _, parentId in ipairs(parents) do
  local dependenciesKey = ARGV[1] .. parentId .. ":dependencies"
  local children = redis.call("SMEMBERS", dependenciesKey)
  if #children == 0 then
    out[#out + 1] = "F1"
    out[#out + 1] = parentId
    out[#out + 1] = "in waiting-children without pending dependencies"
  end
  for _, childKey in ipairs(children) do
    if redis.call("EXISTS", childKey) == 0 then
      out[#out + 1] = "F2"
      out[#out + 1] = parentId
      out[#out + 1] = "dependency " .. childKey .. " does not exist"
    end
  end
end
return out
