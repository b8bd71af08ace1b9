--[[
  releaseGroupJobs: EchoMQ extension (docs/groups.md), the feeder's step.
  Moves up to `count` group jobs into wait, round robin over the groups that
  may run: not paused, fewer released-and-unfinished jobs than the group's
  concurrency, room in its sliding rate window. One job per group per turn.

  KEYS
    1 {P}gr:ready    2 {P}gr:limited   3 {P}gr:jobs     4 {P}gr:seq
    5 {P}wait        6 {P}meta         7 {P}marker      8 {P}events
    9 {P}active      10 {P}gr:defaults
  ARGV
    1 {P}
    2 count: most jobs released by this call (also bounds the groups looked at)
    3 max ready: release only while wait holds fewer ids (0 = no bound)
    4 default concurrency (0 = none), 5 default max per window (0 = none),
    6 default window ms: the feeder's own, for groups without settings of
    their own when the queue's defaults (KEYS[10], written by workers with a
    group option) do not set them
  First, delayed group jobs that are due ({P}gr:delayed: group → earliest due
  ms; {P}gr:g:<gid>:delayed: job → due ms; built from {P}) move into their
  group's set, at most `count` jobs of at most `count` groups per call.
  Returns
    {released, next}: next = ms (Redis clock) when a rate-limited group may
    release again or a delayed group job is due, -1 when neither waits.
  Events: waiting, per released job (as addStandardJob's).
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/groupQueue"

local prefix = ARGV[1]
local count = tonumber(ARGV[2]) or 0
local maxReady = tonumber(ARGV[3]) or 0
-- One value in Redis for the whole fleet beats each feeder's own.
local stored = redis.call("HMGET", KEYS[10], "concurrency", "max", "duration")
local defaultConcurrency = tonumber(stored[1]) or tonumber(ARGV[4]) or 0
local defaultMax, defaultDuration = tonumber(stored[2]), tonumber(stored[3])
if not (defaultMax and defaultDuration) then
  defaultMax, defaultDuration = tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Due delayed jobs join their group's set, in due order, behind the jobs
-- already there of the same priority.
local delayedIndex = prefix .. "gr:delayed"
local promoted = 0
for _, gid in ipairs(redis.call("ZRANGEBYSCORE", delayedIndex, "-inf", now, "LIMIT", 0, count)) do
  if promoted >= count then
    break
  end
  local base = groupBase(prefix, gid)
  local delayedKey = base .. ":delayed"
  local moved = 0
  for _, jobId in ipairs(redis.call("ZRANGEBYSCORE", delayedKey, "-inf", now, "LIMIT", 0, count - promoted)) do
    redis.call("ZREM", delayedKey, jobId)
    local opts = redis.call("HGET", prefix .. jobId, "opts")
    -- A job removed while delayed leaves its id behind: dropped here.
    if opts then
      local ok, decoded = pcall(cjson.decode, opts)
      local group = ok and type(decoded) == "table" and decoded["group"]
      local priority = type(group) == "table" and tonumber(group["priority"]) or 0
      local counter = redis.call("HINCRBY", base, "pc", 1)
      redis.call("ZADD", base .. ":wait", string.format("%d", priority * 4294967296 + counter), jobId)
      moved = moved + 1
    end
    promoted = promoted + 1
  end
  local nextJob = redis.call("ZRANGE", delayedKey, 0, 0, "WITHSCORES")
  if nextJob[2] then
    redis.call("ZADD", delayedIndex, nextJob[2], gid)
  else
    redis.call("ZREM", delayedIndex, gid)
  end
  if moved > 0 and redis.call("HEXISTS", base, "paused") == 0 then
    enqueueGroup(KEYS[1], KEYS[4], gid)
  end
  markBusy(prefix, gid)
end

-- Groups whose window has room again go back to the round robin.
local due = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", now, "LIMIT", 0, count)
for _, gid in ipairs(due) do
  redis.call("ZREM", KEYS[2], gid)
  enqueueGroup(KEYS[1], KEYS[4], gid)
end

local room = count
if maxReady > 0 then
  room = math.min(room, maxReady - redis.call("LLEN", KEYS[5]))
end

-- "ok", "full" (at concurrency: a finish re-queues it), "limited" (with the
-- time its window frees), "idle" (paused or nothing waiting).
local function budget(base, settings)
  if settings[1] then
    return "idle"
  end
  local concurrency = tonumber(settings[2]) or defaultConcurrency
  if concurrency > 0 and redis.call("SCARD", base .. ":active") >= concurrency then
    return "full"
  end
  local max, duration = tonumber(settings[3]), tonumber(settings[4])
  if not max then
    max, duration = defaultMax, defaultDuration
  end
  if max > 0 and duration and duration > 0 then
    local window = base .. ":window"
    redis.call("ZREMRANGEBYSCORE", window, "-inf", now - duration)
    if redis.call("ZCARD", window) >= max then
      local oldest = redis.call("ZRANGE", window, 0, 0, "WITHSCORES")
      return "limited", tonumber(oldest[2]) + duration, max, duration
    end
    return "ok", nil, max, duration
  end
  return "ok"
end

local released = 0
local maxEvents
local looked = 0
while released < room and looked < room + count do
  local popped = redis.call("ZPOPMIN", KEYS[1])
  if #popped == 0 then
    break
  end
  looked = looked + 1
  local gid = popped[1]
  local base = groupBase(prefix, gid)
  local settings = redis.call("HMGET", base, "paused", "concurrency", "max", "duration")
  local state, freeAt, max, duration = budget(base, settings)
  if state == "limited" then
    redis.call("ZADD", KEYS[2], freeAt, gid)
  elseif state == "ok" then
    -- A job removed while it waited in the group leaves its id behind; a
    -- bounded number of them is skipped per turn.
    local jobId
    for _ = 1, 100 do
      local next = redis.call("ZPOPMIN", base .. ":wait")
      if #next == 0 then
        break
      end
      if redis.call("EXISTS", prefix .. next[1]) == 1 then
        jobId = next[1]
        break
      end
    end
    -- A release keeps the group's total; skipped vanished ids lower it.
    markBusy(prefix, gid)
    if jobId then
      redis.call("SADD", base .. ":active", jobId)
      redis.call("HSET", KEYS[3], jobId, gid)
      redis.call("LPUSH", KEYS[5], jobId)
      maxEvents = maxEvents or getOrSetMaxEvents(KEYS[6])
      local entry = redis.call("XADD", KEYS[8], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)
      if max then
        -- The release is logged at its entry's time (never before `now`), so
        -- the window holds on the stream's clock as well as on TIME's.
        redis.call("ZADD", base .. ":window", string.match(entry, "^%d+"), jobId)
        redis.call("PEXPIRE", base .. ":window", duration)
      end
      released = released + 1
    end
    if redis.call("ZCARD", base .. ":wait") > 0 then
      local after, afterFree = budget(base, settings)
      if after == "ok" then
        enqueueGroup(KEYS[1], KEYS[4], gid)
      elseif after == "limited" then
        redis.call("ZADD", KEYS[2], afterFree, gid)
      end
    end
  end
end

if released > 0 then
  addBaseMarkerIfNeeded(KEYS[7], isQueuePausedOrMaxed(KEYS[6], KEYS[9]))
end

local nextDue = -1
for _, key in ipairs({ KEYS[2], delayedIndex }) do
  local first = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  if first[2] and (nextDue < 0 or tonumber(first[2]) < nextDue) then
    nextDue = tonumber(first[2])
  end
end
return { released, nextDue }
