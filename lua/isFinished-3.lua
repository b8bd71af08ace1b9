--[[
  isFinished: whether a job has completed or failed (docs/protocol.md §Scripts).

  KEYS[1] {P}completed
  KEYS[2] {P}failed
  KEYS[3] job key
  ARGV[1] job id
  ARGV[2] "1" to also return the result, else ""

  Returns 1 completed, 2 failed, 0 neither, -1 missing job.
  With ARGV[2] = "1": [1, returnvalue], [2, failedReason], [0], or
  [-1, "Missing key for job <jobKey>. isFinished"].
]]
local rcall = redis.call
local jobKey = KEYS[3]
local jobId = ARGV[1]
local withValue = ARGV[2] == "1"

if rcall("EXISTS", jobKey) ~= 1 then
  if withValue then
    return { -1, "Missing key for job " .. jobKey .. ". isFinished" }
  end
  return -1
end

if rcall("ZSCORE", KEYS[1], jobId) then
  if withValue then
    return { 1, rcall("HGET", jobKey, "returnvalue") }
  end
  return 1
end

if rcall("ZSCORE", KEYS[2], jobId) then
  if withValue then
    return { 2, rcall("HGET", jobKey, "failedReason") }
  end
  return 2
end

if withValue then
  return { 0 }
end
return 0
