--[[
  getCountsPerPriority: how many ready jobs wait at each given priority
  (docs/protocol.md §Priorities).

  KEYS
    1 {P}wait (or {P}paused while the queue is paused)
    2 {P}prioritized
  ARGV
    1.. priorities
  Returns
    one count per priority, in argument order: priority 0 counts the wait
    list, any other the prioritized scores of that priority's band
    (priority * 2^32 .. (priority + 1) * 2^32 - 1).
]]
local band = 0x100000000
local counts = {}
for i = 1, #ARGV do
  local priority = tonumber(ARGV[i])
  if priority == 0 then
    counts[i] = redis.call("LLEN", KEYS[1])
  else
    counts[i] = redis.call("ZCOUNT", KEYS[2], priority * band, (priority + 1) * band - 1)
  end
end
return counts
