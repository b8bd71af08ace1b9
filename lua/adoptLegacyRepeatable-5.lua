--[[
  adoptLegacyRepeatable: EchoMQ extension (`echomq adopt`, docs/migrating.md).
  Turns one legacy repeatable job of BullMQ <= 4 (a `{P}repeat` member of the
  shape `name:id:endDate:tz:pattern`) into a job scheduler, in one atomic step:
  the legacy member leaves the index, the scheduler enters it at the same
  millis, its definition hash is written, and the pending iteration (the job
  `repeat:<id>:<millis>` BullMQ 4 created) becomes the scheduler's current
  iteration by taking the scheduler's id as its `rjk`.

  KEYS
    1 {P}repeat   2 {P}delayed   3 {P}prioritized
    4 {P}repeat:<scheduler id>   (the definition hash)
    5 {P}repeat:<scheduler id>:<millis>   (the legacy pending iteration)
  ARGV
    1 the legacy member
    2 the scheduler id (the MD5 part of the iteration ids BullMQ 4 made)
    3 the member's score as the client read it
    4 the definition hash, msgpack array of field, value, field, value...
    5 the iteration's options rewritten for a scheduler (JSON text)
  Returns
    0 nothing to do: the member is gone (converted already, or removed)
    1 converted; the pending iteration is the scheduler's
    2 converted; the iteration is missing, taken or finished, so the caller
      creates its successor (updateJobScheduler, this job as producer)
    3 refused: the member's score moved since it was read (read it again)
    4 refused: another scheduler already has this id
]]
local repeatKey = KEYS[1]
local score = redis.call("ZSCORE", repeatKey, ARGV[1])
if not score then
  return 0
end
if tonumber(score) ~= tonumber(ARGV[3]) then
  return 3
end
if redis.call("EXISTS", KEYS[4]) == 1 then
  return 4
end

local jobId = "repeat:" .. ARGV[2] .. ":" .. ARGV[3]
redis.call("ZREM", repeatKey, ARGV[1])
redis.call("ZADD", repeatKey, score, ARGV[2])
redis.call("HMSET", KEYS[4], unpack(cmsgpack.unpack(ARGV[4])))

-- A job still pending (delayed or prioritized, or waiting and never taken)
-- produces the successor when a worker takes it. One a worker has taken
-- already found no scheduler and produced nothing, so the caller does; its
-- `rjk` is rewritten all the same, and should it run again, the script that
-- would create its successor refuses a producer that is no longer current.
local jobKey = KEYS[5]
if redis.call("EXISTS", jobKey) == 0 or redis.call("HEXISTS", jobKey, "finishedOn") == 1 then
  return 2
end
redis.call("HSET", jobKey, "rjk", ARGV[2], "opts", ARGV[5])
if redis.call("ZSCORE", KEYS[2], jobId) or redis.call("ZSCORE", KEYS[3], jobId)
    or redis.call("HEXISTS", jobKey, "processedOn") == 0 then
  return 1
end
return 2
