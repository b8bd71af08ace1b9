--[[
  enforceBudget: EchoMQ extension (docs/operations.md §Memory, docs/protocol.md
  §Byte budgets). One bounded step of a queue's byte budget: estimate the
  bytes the queue keeps after work is done (completed and failed jobs with
  their sub-keys, and the events stream), and, over the budget, trim the
  events stream to its share and remove the oldest finished jobs, with the
  effects of BullMQ's own retention (removeOnComplete/removeOnFail: the job
  detached from its parent, its keys deleted, no event).

  Waiting, delayed, prioritized, active and waiting-children jobs are never
  looked at: only the heads of `completed` and `failed`.

  KEYS
    1 {P}budget (HASH: max, and what the last step saw)
    2 {P}completed   3 {P}failed   4 {P}events
  ARGV
    1 {P}
    2 most jobs removed by this call (the page)
    3 jobs sampled per finished set for the estimate
    4 sample offset in [0, 1) (the caller varies it between calls)
    5 the level a step removes down to, in percent of the budget
    6 the events stream's share of the budget, in percent
    7 "1" to enforce, "0" to measure only (nothing written)
  Returns
    {max, used before, used after, jobs removed, events trimmed,
     completed count, failed count, bytes of finished jobs (estimate),
     bytes of the events stream (estimate), 1 when more is to be removed}
    max = 0: the queue has no budget; enforcing, that is one HGET and
    nothing else (a dormant queue's tick), measuring goes on without one.

  Cost: O(page + samples) MEMORY USAGE, ZRANGE and DEL calls, whatever the
  sets hold. Accuracy: a finished set's bytes are its ZCARD times the mean
  of `samples` jobs spread evenly over its ranks (each measured whole:
  MEMORY USAGE ... SAMPLES 0 on the hash, sampled on its lists and sets);
  the set's own entries are Redis's sampled MEMORY USAGE, and so are the
  stream's (`samples` of its nodes). The bytes a removal
  frees are measured on each job it removes.
]]
--- @include "includes/batches"
--- @include "includes/removeJob"

local rcall = redis.call
local enforce = ARGV[7] == "1"
local max = tonumber(rcall("HGET", KEYS[1], "max") or "0") or 0
if max <= 0 and enforce then
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end

local prefix = ARGV[1]
local page = tonumber(ARGV[2])
local samples = tonumber(ARGV[3])
local offset = tonumber(ARGV[4])
local low = max * tonumber(ARGV[5]) / 100
local eventsShare = max * tonumber(ARGV[6]) / 100

local subKeys = {":logs", ":dependencies", ":processed", ":failed", ":unsuccessful"}

local function jobBytes(id)
  local jobKey = prefix .. id
  -- A job hash holds a few big fields (data, returnvalue) among small ones:
  -- sampling its fields would miss them, so it is measured whole.
  local n = rcall("MEMORY", "USAGE", jobKey, "SAMPLES", "0") or 0
  -- Most finished jobs have no logs and no children: one EXISTS says so.
  if rcall("EXISTS", jobKey .. subKeys[1], jobKey .. subKeys[2], jobKey .. subKeys[3],
    jobKey .. subKeys[4], jobKey .. subKeys[5]) > 0 then
    for _, s in ipairs(subKeys) do
      n = n + (rcall("MEMORY", "USAGE", jobKey .. s) or 0)
    end
  end
  return n
end

local function setBytes(key)
  local n = rcall("ZCARD", key)
  if n == 0 then
    return 0, 0
  end
  local m = math.min(samples, n)
  local sum = 0
  for i = 0, m - 1 do
    local rank = math.floor((i + offset) * n / m)
    local id = rcall("ZRANGE", key, rank, rank)[1]
    if id then
      sum = sum + jobBytes(id)
    end
  end
  -- The set's own entries count too (sampled: a skiplist's are alike).
  sum = sum * n / m + (rcall("MEMORY", "USAGE", key) or 0)
  return n, math.floor(sum)
end

local completedCount, completedBytes = setBytes(KEYS[2])
local failedCount, failedBytes = setBytes(KEYS[3])
local jobsBytes = completedBytes + failedBytes
local eventsLen = rcall("XLEN", KEYS[4])
local eventsBytes = 0
if eventsLen > 0 then
  eventsBytes = rcall("MEMORY", "USAGE", KEYS[4], "SAMPLES", string.format("%d", samples)) or 0
end
local usedBefore = jobsBytes + eventsBytes

if not enforce then
  return {max, usedBefore, usedBefore, 0, 0, completedCount, failedCount, jobsBytes, eventsBytes, 0}
end

local trimmed = 0
local removed = 0
local more = 0
if usedBefore > max then
  -- The events stream first, down to its share: a few huge events must not
  -- cost the finished jobs their place.
  if eventsBytes > eventsShare and eventsLen > 0 then
    local perEntry = eventsBytes / eventsLen
    local keep = math.floor(eventsShare / perEntry)
    trimmed = rcall("XTRIM", KEYS[4], "MAXLEN", "~", string.format("%d", keep),
      "LIMIT", string.format("%d", page * 100))
    eventsBytes = math.max(0, eventsBytes - math.floor(trimmed * perEntry))
  end

  -- Then the oldest finished jobs, both sets merged by finish time.
  local excess = jobsBytes + eventsBytes - low
  if excess > 0 then
    local c = rcall("ZRANGE", KEYS[2], 0, page - 1, "WITHSCORES")
    local f = rcall("ZRANGE", KEYS[3], 0, page - 1, "WITHSCORES")
    local ci, fi = 1, 1
    local goneC, goneF = {}, {}
    while excess > 0 and removed < page do
      local takeC
      if c[ci] and f[fi] then
        takeC = tonumber(c[ci + 1]) <= tonumber(f[fi + 1])
      elseif c[ci] then
        takeC = true
      elseif f[fi] then
        takeC = false
      else
        break
      end
      local id
      if takeC then
        id = c[ci]
        ci = ci + 2
        goneC[#goneC + 1] = id
      else
        id = f[fi]
        fi = fi + 2
        goneF[#goneF + 1] = id
      end
      local bytes = jobBytes(id)
      removeJob(id, false, prefix, false)
      excess = excess - bytes
      jobsBytes = jobsBytes - bytes
      removed = removed + 1
    end
    for from, to in batches(#goneC, 7000) do
      rcall("ZREM", KEYS[2], unpack(goneC, from, to))
    end
    for from, to in batches(#goneF, 7000) do
      rcall("ZREM", KEYS[3], unpack(goneF, from, to))
    end
    completedCount = completedCount - #goneC
    failedCount = failedCount - #goneF
    if excess > 0 and (completedCount > 0 or failedCount > 0) then
      more = 1
    end
  end
end

local usedAfter = math.max(0, jobsBytes) + eventsBytes
local t = rcall("TIME")
rcall("HSET", KEYS[1], "used", string.format("%d", usedAfter), "at",
  string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
if removed > 0 then
  rcall("HINCRBY", KEYS[1], "removed", string.format("%d", removed))
end
if trimmed > 0 then
  rcall("HINCRBY", KEYS[1], "trimmed", string.format("%d", trimmed))
end
return {max, usedBefore, usedAfter, removed, trimmed, completedCount, failedCount,
  math.max(0, jobsBytes), eventsBytes, more}
