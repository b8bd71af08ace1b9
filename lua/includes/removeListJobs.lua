--[[
  removeListJobs(key, hard, prefix, max, ignoreSet) -> remaining budget

  H16 "remove list jobs": removes (with dedup) up to `max` ids taken from the
  head of the list (`max` = 0: all of them), sparing ids in ignoreSet.
  Quirk kept on purpose (docs/protocol.md §Quirks): the list is trimmed by the number of
  removed ids from the head, wherever the spared ids were.
  Returns max minus the number of removed ids (negative when max = 0).
]]
--- @include "includes/removeJob"
--- @include "includes/filterOutJobsToIgnore"

local function removeListJobs(key, hard, prefix, max, ignoreSet)
  local jobIds = filterOutJobsToIgnore(redis.call("LRANGE", key, 0, max - 1), ignoreSet)
  for _, jobId in ipairs(jobIds) do
    removeJob(jobId, hard, prefix, true)
  end
  redis.call("LTRIM", key, #jobIds, -1)
  return max - #jobIds
end
