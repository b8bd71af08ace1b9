--[[
  isJobSchedulerJob(jobId, jobKey, repeatKey) -> bool

  H18: true when the job is the current (next) iteration of its job
  scheduler. Removing that job would silently stop the schedule, so removal
  paths spare it. The scheduler score is used as Redis renders it, which
  yields the same digits as the id built from the millis.
]]
local function isJobSchedulerJob(jobId, jobKey, repeatKey)
  local schedulerId = redis.call("HGET", jobKey, "rjk")
  if schedulerId then
    local millis = redis.call("ZSCORE", repeatKey, schedulerId)
    if millis then
      return jobId == "repeat:" .. schedulerId .. ":" .. millis
    end
  end
  return false
end
