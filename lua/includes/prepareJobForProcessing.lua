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

  -- One read and one write instead of HMSET, HINCRBY and HGETALL: the hash is
  -- read first and the reply patched to what it holds after the write. The
  -- fields written, their values and (for new fields) their order are those
  -- of HMSET processedOn [pb] + HINCRBY ats.
  local hash = redis.call("HGETALL", jobKey)
  local writes = { "processedOn", timestamp }
  if opts["name"] then
    writes[3] = "pb"
    writes[4] = tostring(opts["name"])
  end
  local at = {}
  for i = 1, #hash, 2 do
    at[hash[i]] = i + 1
  end
  local ats = tostring((tonumber(at["ats"] and hash[at["ats"]]) or 0) + 1)
  writes[#writes + 1] = "ats"
  writes[#writes + 1] = ats
  redis.call("HMSET", jobKey, unpack(writes))
  for i = 1, #writes, 2 do
    local slot = at[writes[i]]
    if slot then
      hash[slot] = writes[i + 1]
    else
      hash[#hash + 1] = writes[i]
      hash[#hash + 1] = writes[i + 1]
    end
  end

  -- Re-arm unconditionally: another idle worker wakes up and tries the next job.
  redis.call("ZADD", markerKey, 0, "0")

  return { hash, jobId, 0, 0 }
end
