--[[
  releaseLock: delete a job lock if the caller owns it (docs/protocol.md §Scripts).
  Not called by BullMQ's Node client; the transitions release locks.

  KEYS
    1 lock key {P}<id>:lock
  ARGV
    1 token
    2 lock duration (ignored)
  Returns
    1 when deleted, 0 otherwise.
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
