--[[
  getMetrics: the per-minute series moveToFinished records when a worker
  runs with metrics on (docs/flows.md §Metrics). Read-only.

  KEYS
    1 {P}metrics:<completed|failed> (hash: count, prevTS, prevCount)
    2 {P}metrics:<completed|failed>:data (list, newest minute first)
  ARGV
    1 start index   2 end index (LRANGE semantics, -1 = last)
  Returns
    { {count, prevTS, prevCount} (nil when absent), data points, data length }
]]
local meta = redis.call("HMGET", KEYS[1], "count", "prevTS", "prevCount")
local points = redis.call("LRANGE", KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]))
return { meta, points, redis.call("LLEN", KEYS[2]) }
