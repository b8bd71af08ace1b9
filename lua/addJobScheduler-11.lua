--[[
  addJobScheduler: create or replace a job scheduler and its current
  iteration (docs/protocol.md §Scripts, §Job schedulers).

  KEYS
    1 {P}repeat   2 {P}delayed   3 {P}wait         4 {P}paused
    5 {P}meta     6 {P}prioritized                 7 {P}marker
    8 {P}id       9 {P}events   10 {P}pc          11 {P}active
  ARGV
    1 next millis computed by the client (cron); ignored for every ("")
    2 scheduler options (msgpack map: name, pattern?, every?, tz?, limit?,
      startDate?, endDate?, offset?)
    3 scheduler id
    4 template data (JSON text)
    5 template job options (msgpack map, stored form)
    6 first iteration's job options (msgpack map)
    7 now (ms)
    8 {P}
    9 producer job key or "" (unused)
  Returns
    {jobId, delay} | -10 (cron id collision) | -11 (every: 32 slots busy)
  Events: added, then delayed or waiting. Replacing the pending iteration
  emits nothing for it.
]]
--- @include "includes/addJobFromScheduler"
--- @include "includes/everyNextMillis"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/removeJob"
--- @include "includes/storeJobScheduler"

local repeatKey = KEYS[1]
local delayedKey = KEYS[2]
local metaKey = KEYS[5]
local prioritizedKey = KEYS[6]

local schedulerOpts = cmsgpack.unpack(ARGV[2])
local schedulerId = ARGV[3]
local templateData = ARGV[4]
local templateOpts = cmsgpack.unpack(ARGV[5])
local iterationOpts = cmsgpack.unpack(ARGV[6])
local now = tonumber(ARGV[7])
local prefix = ARGV[8]
local schedulerKey = repeatKey .. ":" .. schedulerId

local maxEvents = getOrSetMaxEvents(metaKey)

local prevMillis = redis.call("ZSCORE", repeatKey, schedulerId)
if prevMillis then
  prevMillis = tonumber(prevMillis)
else
  prevMillis = nil
end

local every = schedulerOpts["every"]
local repeatOpts = iterationOpts["repeat"]
local offset = schedulerOpts["offset"] or (repeatOpts and repeatOpts["offset"]) or 0
local newOffset = offset

local nextMillis
local everyChanged = false
if every then
  local basis = prevMillis
  if prevMillis ~= nil and tonumber(redis.call("HGET", schedulerKey, "every")) ~= every then
    -- A new interval starts a new series: the old slot says nothing about it.
    basis = nil
    everyChanged = true
  end
  nextMillis, newOffset = everyNextMillis(basis, every, now, offset, schedulerOpts["startDate"])
else
  nextMillis = tonumber(ARGV[1])
end

-- Only an iteration nobody has taken yet may be replaced; one that is active
-- or finished belongs to its run and is left alone.
local function removePendingIteration(jobId)
  if redis.call("ZREM", delayedKey, jobId) == 1 or redis.call("ZREM", prioritizedKey, jobId) == 1 then
    removeJob(jobId, true, prefix, true)
    return true
  end
  -- Paused 6.x queues keep jobs in wait, so this LREM of `paused` finds
  -- nothing there; BullMQ behaves the same (docs/protocol.md §Quirks).
  local listKey = isQueuePaused(metaKey) and KEYS[4] or KEYS[3]
  if redis.call("LREM", listKey, 1, jobId) > 0 then
    removeJob(jobId, true, prefix, true)
    return true
  end
  return false
end

local removedPrev = false
if prevMillis ~= nil then
  local prevJobId = "repeat:" .. schedulerId .. ":" .. prevMillis
  if redis.call("EXISTS", prefix .. prevJobId) == 1 then
    removedPrev = removePendingIteration(prevJobId)
  end
end

if removedPrev then
  -- Re-upserting an unchanged interval keeps the slot, so the iteration id
  -- (and with it every worker's view of "current") stays the same.
  if every and not everyChanged then
    nextMillis = prevMillis
  end
else
  schedulerOpts["offset"] = newOffset
end

local jobId = "repeat:" .. schedulerId .. ":" .. nextMillis
local collision = false
if redis.call("EXISTS", prefix .. jobId) == 1 then
  if every then
    -- Leftover iterations of an earlier scheduler with the same id can hold
    -- several consecutive slots; walk forward, but not forever.
    local free = false
    for _ = 1, 32 do
      nextMillis = nextMillis + every
      jobId = "repeat:" .. schedulerId .. ":" .. nextMillis
      if redis.call("EXISTS", prefix .. jobId) == 0 then
        free = true
        break
      end
    end
    if not free then
      return -11
    end
  else
    collision = true
  end
end

if collision and not removedPrev then
  return -10
end

local delay = math.max(0, nextMillis - now)

storeJobScheduler(schedulerId, schedulerKey, repeatKey, nextMillis, schedulerOpts, templateData, templateOpts)
redis.call("INCR", KEYS[8])
addJobFromScheduler(prefix, jobId, iterationOpts, schedulerOpts["name"], templateData, now, schedulerId, delay,
  maxEvents)

return {jobId, delay}
