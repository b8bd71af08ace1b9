--[[
  drainChunk: EchoMQ extension (docs/scale.md §Chunked operations). One bounded
  step of a drain: removes, hard, up to ARGV[4] jobs of one ready or delayed
  structure, sparing the current iteration of each job scheduler, exactly as
  drain-5 removes each job (removeJob, hard, dedup key freed) and with no
  events. Unlike drain-5, a spared iteration keeps its place: the window is
  taken past the ids already spared (ARGV[3], which the caller accumulates
  from the replies), so a step never looks at more than ARGV[3] + ARGV[4] ids.

  KEYS[1] the structure: {P}wait, {P}paused (lists), {P}prioritized or
          {P}delayed (sorted sets)
  KEYS[2] {P}repeat
  ARGV[1] {P}
  ARGV[2] "list" or "zset"
  ARGV[3] ids at the front already spared by earlier steps
  ARGV[4] budget: most ids looked at past them

  Returns {removed, spared in this window, ids looked at}.
]]
local rcall = redis.call

--- @include "includes/removeJob"
--- @include "includes/batches"

local key = KEYS[1]
local repeatKey = KEYS[2]
local prefix = ARGV[1]
local offset = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])

-- The current iteration of a scheduler is "repeat:<id>:<millis>" with
-- <millis> its score in {P}repeat (as Redis renders it, like drain-5's set).
local function spared(jobId)
  if string.sub(jobId, 1, 7) ~= "repeat:" then
    return false
  end
  local rest = string.sub(jobId, 8)
  local schedulerId = string.match(rest, "^(.*):[^:]*$")
  if not schedulerId then
    return false
  end
  local millis = rcall("ZSCORE", repeatKey, schedulerId)
  return millis and jobId == "repeat:" .. schedulerId .. ":" .. millis
end

local removed, kept = 0, 0
if ARGV[2] == "list" then
  -- The spared front and the window come off together; what is spared goes
  -- back in front in its order.
  local ids = rcall("LRANGE", key, 0, offset + budget - 1)
  local keep = {}
  for i, jobId in ipairs(ids) do
    if i <= offset or spared(jobId) then
      keep[#keep + 1] = jobId
      if i > offset then
        kept = kept + 1
      end
    else
      removeJob(jobId, true, prefix, true)
      removed = removed + 1
    end
  end
  if removed > 0 then
    rcall("LTRIM", key, #ids, -1)
    for i = #keep, 1, -1 do
      rcall("LPUSH", key, keep[i])
    end
  end
  return {removed, kept, #ids - math.min(offset, #ids)}
end

local ids = rcall("ZRANGE", key, offset, offset + budget - 1)
local gone = {}
for _, jobId in ipairs(ids) do
  if spared(jobId) then
    kept = kept + 1
  else
    removeJob(jobId, true, prefix, true)
    gone[#gone + 1] = jobId
  end
end
for from, to in batches(#gone, 7000) do
  rcall("ZREM", key, unpack(gone, from, to))
end
return {#gone, kept, #ids}
