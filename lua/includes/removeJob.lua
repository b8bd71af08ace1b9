--[[
  removeJob(jobId, hard, prefix, removeDedup)

  H16 "remove job": detach from the parent, optionally free the deduplication
  id, delete the job keys. Neither state lists nor events are touched; the
  caller owns both. Retention trimming passes removeDedup = false because a
  finished job has already released its deduplication key on finalisation.
]]
--- @include "includes/removeJobKeys"
--- @include "includes/removeDeduplicationKeyIfNeeded"
--- @include "includes/removeParentDependencyKey"

local function removeJob(jobId, hard, prefix, removeDedup)
  local jobKey = prefix .. jobId
  removeParentDependencyKey(jobKey, hard, nil, prefix)
  if removeDedup then
    local deduplicationId = redis.call("HGET", jobKey, "deid")
    removeDeduplicationKeyIfNeededOnRemoval(prefix, jobId, deduplicationId)
  end
  removeJobKeys(jobKey)
end
