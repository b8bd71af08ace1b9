--[[
  H14: a transition out of active is only allowed for the lock owner. Token
  "0" means the caller runs without locks. Releasing the lock also takes the
  job out of the stalled candidates, since its owner is clearly alive.
  g: a group call's deferred writes (includes/groupWrites), or nil.
]]
local function removeLock(jobKey, stalledKey, token, jobId, g)
  if token == "0" then
    return 0
  end
  local lockKey = jobKey .. ":lock"
  local owner = redis.call("GET", lockKey)
  if owner == token then
    redis.call("DEL", lockKey)
    if g then
      g.srem[#g.srem + 1] = jobId
    else
      redis.call("SREM", stalledKey, jobId)
    end
    return 0
  end
  if owner then
    return -6
  end
  return -2
end
