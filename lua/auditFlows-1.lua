--[[
  auditFlows: EchoMQ extension, read-only. The flow invariants of a queue's
  parents (docs/flows.md §Audit), checked a bounded step at a time:
    F1  a parent in waiting-children has at least one pending dependency
        (otherwise nothing will ever move it on)
    F2  every pending dependency of such a parent is an existing job hash
  A step looks at about ARGV[4] children: a parent with 10 000 children is
  read over several steps (SSCAN), each one atomic.

  KEYS
    1 {P}waiting-children
  ARGV
    1 {P}   2 index of the parent to go on with   3 SSCAN cursor in its
    dependencies ("0": from the start)   4 budget (children and parents looked at)
  Returns
    {next parent index, next cursor, 1 when every parent is done else 0,
     {check, parent id, detail, ...}}
]]
local out = {}
local index = tonumber(ARGV[2])
local cursor = ARGV[3]
local budget = tonumber(ARGV[4])
local spent = 0
while spent < budget do
  local parent = redis.call("ZRANGE", KEYS[1], index, index)[1]
  if not parent then
    return {index, "0", 1, out}
  end
  local dependenciesKey = ARGV[1] .. parent .. ":dependencies"
  if cursor == "0" and redis.call("SCARD", dependenciesKey) == 0 then
    out[#out + 1] = "F1"
    out[#out + 1] = parent
    out[#out + 1] = "in waiting-children without pending dependencies"
    index = index + 1
    spent = spent + 1
  else
    local reply = redis.call("SSCAN", dependenciesKey, cursor, "COUNT",
      string.format("%d", math.max(1, budget - spent)))
    for _, childKey in ipairs(reply[2]) do
      if redis.call("EXISTS", childKey) == 0 then
        out[#out + 1] = "F2"
        out[#out + 1] = parent
        out[#out + 1] = "dependency " .. childKey .. " does not exist"
      end
    end
    spent = spent + 1 + #reply[2]
    cursor = reply[1]
    if cursor == "0" then
      index = index + 1
    end
  end
end
return {index, cursor, 0, out}
