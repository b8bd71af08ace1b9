--[[
  H17: keepJobs applied to completed/failed right after a job was added with
  score `timestamp`. Trimmed jobs are deleted silently (no `removed` event)
  and keep their deduplication keys (finalization already handled those).
  removeJobsByMaxAge(timestamp, maxAge, targetSet, prefix, limit)
    maxAge in seconds; at most `limit` (default 1000) jobs per call
  removeJobsByMaxCount(maxCount, targetSet, prefix)
    keeps the newest maxCount jobs
]]
--- @include "includes/batches"
--- @include "includes/removeJob"

local function removeJobsByMaxAge(timestamp, maxAge, targetSet, prefix, limit)
  limit = tonumber(limit) or 1000
  local cut = tonumber(timestamp) - tonumber(maxAge) * 1000
  local jobIds = redis.call("ZREVRANGEBYSCORE", targetSet, cut, "-inf", "LIMIT", 0, limit)
  for _, jobId in ipairs(jobIds) do
    removeJob(jobId, false, prefix, false)
  end
  if #jobIds < limit then
    redis.call("ZREMRANGEBYSCORE", targetSet, "-inf", cut)
  else
    -- More may be left behind for the next finish; drop exactly what was deleted.
    for from, to in batches(#jobIds, 7000) do
      redis.call("ZREM", targetSet, unpack(jobIds, from, to))
    end
  end
end

local function removeJobsByMaxCount(maxCount, targetSet, prefix)
  local start = tonumber(maxCount)
  local jobIds = redis.call("ZREVRANGE", targetSet, start, -1)
  for _, jobId in ipairs(jobIds) do
    removeJob(jobId, false, prefix, false)
  end
  redis.call("ZREMRANGEBYRANK", targetSet, 0, -(start + 1))
end
