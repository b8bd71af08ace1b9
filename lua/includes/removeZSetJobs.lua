--[[
  removeZSetJobs(key, hard, prefix, max, ignoreSet) -> remaining budget

  H16 "remove zset jobs": removes (with dedup) up to `max` lowest-score members
  (`max` = 0: all of them), sparing ids in ignoreSet, then drops exactly the
  removed members from the set. Returns max minus the number removed.
]]
--- @include "includes/removeJob"
--- @include "includes/filterOutJobsToIgnore"
--- @include "includes/batches"

local function removeZSetJobs(key, hard, prefix, max, ignoreSet)
  local jobIds = filterOutJobsToIgnore(redis.call("ZRANGE", key, 0, max - 1), ignoreSet)
  for _, jobId in ipairs(jobIds) do
    removeJob(jobId, hard, prefix, true)
  end
  for from, to in batches(#jobIds, 7000) do
    redis.call("ZREM", key, unpack(jobIds, from, to))
  end
  return max - #jobIds
end
