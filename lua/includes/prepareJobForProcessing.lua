--[[
  H12: finish a take. The id is already at the head of active.
  prepareJobForProcessing(prefix, limiterKey, eventsKey, jobId, timestamp,
                          maxJobs, limiterDuration, markerKey, opts) -> reply
    opts  FetchOpts {token, lockDuration, limiter, name}
  Returns the next-job reply [flat HGETALL, id, 0, 0].
]]
local function prepareJobForProcessing(prefix, limiterKey, eventsKey, jobId, timestamp, maxJobs,
                                       limiterDuration, markerKey, opts)
  local jobKey = prefix .. jobId

  if maxJobs then
    -- The first take of a window opens it; the counter dies with the window.
    if redis.call("INCR", limiterKey) == 1 and limiterDuration then
      redis.call("PEXPIRE", limiterKey, math.floor(math.abs(limiterDuration)))
    end
  end

  local token = opts["token"]
  if token ~= nil and token ~= "0" then
    redis.call("SET", jobKey .. ":lock", token, "PX", opts["lockDuration"])
  end

  -- prev is "waiting" even for prioritized jobs: consumers only know that state.
  redis.call("XADD", eventsKey, "*", "event", "active", "jobId", jobId, "prev", "waiting")

  if opts["name"] then
    redis.call("HMSET", jobKey, "processedOn", timestamp, "pb", opts["name"])
  else
    redis.call("HMSET", jobKey, "processedOn", timestamp)
  end
  redis.call("HINCRBY", jobKey, "ats", 1)

  -- Re-arm unconditionally: another idle worker wakes up and tries the next job.
  redis.call("ZADD", markerKey, 0, "0")

  return { redis.call("HGETALL", jobKey), jobId, 0, 0 }
end
