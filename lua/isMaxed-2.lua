--[[
  isMaxed: whether the queue's global concurrency is used up
  (docs/protocol.md §Global concurrency).

  KEYS
    1 {P}meta
    2 {P}active
  Returns
    1 when meta `concurrency` is set and `active` holds at least that many
    jobs, 0 otherwise.
]]
local concurrency = tonumber(redis.call("HGET", KEYS[1], "concurrency"))
if concurrency and redis.call("LLEN", KEYS[2]) >= concurrency then
  return 1
end
return 0
