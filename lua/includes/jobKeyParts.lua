--[[
  getJobIdFromKey(jobKey) -> jobId
  getJobKeyPrefix(jobKey, jobId) -> "{P}" of the job's queue

  Job keys of other queues (flows) are only known as full keys; the id is what
  follows the last ':' (docs/protocol.md §Job ids), the rest is that queue's prefix.
]]
local function getJobIdFromKey(jobKey)
  return string.match(jobKey, ".*:(.*)")
end

local function getJobKeyPrefix(jobKey, jobId)
  return string.sub(jobKey, 1, #jobKey - #jobId)
end
