--[[
  extendLock: renew one job lock (docs/protocol.md §Scripts).

  KEYS
    1 lock key {P}<id>:lock
    2 {P}stalled
  ARGV
    1 token
    2 lock duration (ms)
    3 job id
  Returns
    1 when renewed, 0 when the lock is missing or held by another token.
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
  -- A renewing owner is alive: the job is no stall candidate.
  redis.call("SREM", KEYS[2], ARGV[3])
  return 1
end
return 0
