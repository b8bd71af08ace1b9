--[[
  getJobScheduler: one scheduler's definition and current millis
  (docs/protocol.md §Scripts).

  KEYS  1 {P}repeat
  ARGV  1 scheduler id
  Returns {HGETALL of the hash, score as a string}, or an empty array.
]]
local millis = redis.call("ZSCORE", KEYS[1], ARGV[1])
if millis then
  return {redis.call("HGETALL", KEYS[1] .. ":" .. ARGV[1]), millis}
end
return {}
