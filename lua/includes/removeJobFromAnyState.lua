--[[
  removeJobFromAnyState(prefix, jobId) -> state name used as `prev`

  H18 "remove from any state": the sorted sets are probed first (ZSCORE is
  O(1)), the lists last; the first hit wins. "unknown" when found nowhere.
]]
local function removeJobFromAnyState(prefix, jobId)
  local sets = { "completed", "waiting-children", "delayed", "failed", "prioritized" }
  for _, state in ipairs(sets) do
    if redis.call("ZSCORE", prefix .. state, jobId) then
      redis.call("ZREM", prefix .. state, jobId)
      return state
    end
  end
  local lists = { "wait", "paused", "active" }
  for _, state in ipairs(lists) do
    if redis.call("LREM", prefix .. state, 1, jobId) == 1 then
      return state
    end
  end
  return "unknown"
end
