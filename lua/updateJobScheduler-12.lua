--[[
  updateJobScheduler: create the iteration after the one a worker has just
  taken (docs/protocol.md §Scripts, §Job schedulers "Producing the next iteration").

  KEYS
    1 {P}repeat   2 {P}delayed   3 {P}wait         4 {P}paused
    5 {P}meta     6 {P}prioritized                 7 {P}marker
    8 {P}id       9 {P}events   10 {P}pc
   11 producer job key or "" (unused)             12 {P}active
  ARGV
    1 next millis computed by the client (cron); ignored for every ("")
    2 scheduler id
    3 template data (unused: the stored data wins)
    4 next iteration's job options (msgpack map)
    5 now (ms)
    6 {P}
    7 producer id: the id of the iteration that was taken
  Returns
    the new iteration's id, or nil (scheduler gone, producer not current, or
    the next iteration exists already: a `duplicated` event)
]]
--- @include "includes/addJobFromScheduler"
--- @include "includes/everyNextMillis"
--- @include "includes/getOrSetMaxEvents"

local repeatKey = KEYS[1]
local schedulerId = ARGV[2]
local iterationOpts = cmsgpack.unpack(ARGV[4])
local now = tonumber(ARGV[5])
local prefix = ARGV[6]
local producerId = ARGV[7]

local prevMillis = redis.call("ZSCORE", repeatKey, schedulerId)
if not prevMillis then
  -- Removed: iterations already out run to completion, without successor.
  return nil
end
prevMillis = tonumber(prevMillis)

local schedulerKey = repeatKey .. ":" .. schedulerId
local stored = redis.call("HMGET", schedulerKey, "name", "data", "every", "startDate", "offset")
local repeatOpts = iterationOpts["repeat"]

local every = tonumber(stored[3])
if not every and repeatOpts and repeatOpts["every"] then
  every = tonumber(repeatOpts["every"])
end

local nextMillis
if every then
  local offset = stored[5] or (repeatOpts and repeatOpts["offset"]) or 0
  nextMillis = everyNextMillis(prevMillis, every, now, offset, stored[4])
else
  nextMillis = tonumber(ARGV[1])
end

-- Only the taker of the current iteration may produce its successor: this is
-- what makes racing workers, retries and stall recoveries create one job.
if producerId ~= "repeat:" .. schedulerId .. ":" .. prevMillis then
  return nil
end

local nextJobId = "repeat:" .. schedulerId .. ":" .. nextMillis
local maxEvents = getOrSetMaxEvents(KEYS[5])
if redis.call("EXISTS", prefix .. nextJobId) == 1 then
  redis.call("XADD", KEYS[9], "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", nextJobId)
  return nil
end

redis.call("ZADD", repeatKey, nextMillis, schedulerId)
redis.call("HINCRBY", schedulerKey, "ic", 1)
redis.call("INCR", KEYS[8])
local delay = math.max(0, nextMillis - now)
addJobFromScheduler(prefix, nextJobId, iterationOpts, stored[1], stored[2] or "{}", now, schedulerId, delay,
  maxEvents)
return nextJobId
