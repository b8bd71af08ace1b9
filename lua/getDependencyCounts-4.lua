--[[
  getDependencyCounts: how many children of a parent are in each of the
  requested groups (docs/flows.md §Reading children). Read-only.

  KEYS
    1 {P}<id>:processed (hash)     2 {P}<id>:dependencies (set)
    3 {P}<id>:failed (hash, ignored failures)
    4 {P}<id>:unsuccessful (zset)
  ARGV
    1.. group names: processed | unprocessed | ignored | failed; any other
        name counts the unsuccessful children, as `failed` does
  Returns
    one count per ARGV entry, in order
]]
local counts = {}
for i = 1, #ARGV do
  local group = ARGV[i]
  if group == "processed" then
    counts[i] = redis.call("HLEN", KEYS[1])
  elseif group == "unprocessed" then
    counts[i] = redis.call("SCARD", KEYS[2])
  elseif group == "ignored" then
    counts[i] = redis.call("HLEN", KEYS[3])
  else
    counts[i] = redis.call("ZCARD", KEYS[4])
  end
end
return counts
