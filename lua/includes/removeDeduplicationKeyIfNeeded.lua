--[[
  removeDeduplicationKeyIfNeededOnRemoval(prefix, jobId, deduplicationId)

  H10 "on removal": only the current owner may free the deduplication id,
  otherwise removing an old job would unblock duplicates of a newer owner.
  The pending "dedup next" proto-job belongs to that owner and goes with it.
  deduplicationId may be nil/false (job without `deid`).
]]
local function removeDeduplicationKeyIfNeededOnRemoval(prefix, jobId, deduplicationId)
  if deduplicationId and deduplicationId ~= "" then
    local deduplicationKey = prefix .. "de:" .. deduplicationId
    if redis.call("GET", deduplicationKey) == jobId then
      redis.call("DEL", deduplicationKey)
      redis.call("DEL", prefix .. "dn:" .. deduplicationId)
    end
  end
end
