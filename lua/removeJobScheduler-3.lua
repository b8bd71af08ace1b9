--[[
  removeJobScheduler: delete a scheduler and its pending delayed iteration
  (docs/protocol.md §Scripts).

  KEYS  1 {P}repeat   2 {P}delayed   3 {P}events
  ARGV  1 scheduler id   2 {P}
  Returns 0 when the scheduler existed, 1 otherwise.
  Events: removed {jobId, prev = delayed} for a deleted iteration. One that is
  already waiting or active runs to completion and finds no scheduler to
  produce a successor for.
]]
--- @include "includes/removeJobKeys"

local schedulerId = ARGV[1]
local millis = redis.call("ZSCORE", KEYS[1], schedulerId)
if millis then
  local jobId = "repeat:" .. schedulerId .. ":" .. millis
  if redis.call("ZREM", KEYS[2], jobId) == 1 then
    removeJobKeys(ARGV[2] .. jobId)
    redis.call("XADD", KEYS[3], "*", "event", "removed", "jobId", jobId, "prev", "delayed")
  end
end

if redis.call("ZREM", KEYS[1], schedulerId) == 1 then
  redis.call("DEL", KEYS[1] .. ":" .. schedulerId)
  return 0
end
return 1
