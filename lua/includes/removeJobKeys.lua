--[[
  removeJobKeys(jobKey) -> number of keys that existed

  Deletes the job hash and its five sub-keys in one DEL (H16). The lock key is
  deliberately left out: callers that own the lock release it themselves.
]]
local function removeJobKeys(jobKey)
  return redis.call("DEL", jobKey, jobKey .. ":logs", jobKey .. ":dependencies",
    jobKey .. ":processed", jobKey .. ":failed", jobKey .. ":unsuccessful")
end
