--[[
  H12: finish a take. The id is already at the head of active.
  prepareJobForProcessing(prefix, limiterKey, eventsKey, jobId, timestamp,
                          maxJobs, limiterDuration, markerKey, opts, g) -> reply
    opts  FetchOpts {token, lockDuration, limiter, name}
    g     a group call's deferred writes (includes/groupWrites), or nil
  Returns the next-job reply [flat HGETALL, id, 0, 0].
]]
local function prepareJobForProcessing(prefix, limiterKey, eventsKey, jobId, timestamp, maxJobs,
                                       limiterDuration, markerKey, opts, g)
  local jobKey = prefix .. jobId

  -- A job carrying a deferred failure (`defa`) is failed without running:
  -- it takes no token of the rate limit.
  if maxJobs and redis.call("HEXISTS", jobKey, "defa") == 0 then
    -- The first take of a window opens it; the counter dies with the window.
    if redis.call("INCR", limiterKey) == 1 and limiterDuration then
      redis.call("PEXPIRE", limiterKey, math.floor(math.abs(limiterDuration)))
    end
  end

  local token = opts["token"]
  if token ~= nil and token ~= "0" then
    -- As text: a Lua number argument costs Redis a float formatting.
    -- A group formats each of its options' lockDuration once (g.lockPx).
    local px = g and g.lockPx and g.lockPx[opts]
    redis.call("SET", jobKey .. ":lock", token, "PX", px or string.format("%d", opts["lockDuration"]))
  end

  -- prev is "waiting" even for prioritized jobs: consumers only know that state.
  redis.call("XADD", eventsKey, "*", "event", "active", "jobId", jobId, "prev", "waiting")

  -- One read and one write instead of HMSET, HINCRBY and HGETALL: the hash is
  -- read first and the reply patched to what it holds after the write. The
  -- fields written, their values and (for new fields) their order are those
  -- of HMSET processedOn [pb] + HINCRBY ats. The reply is scanned rather than
  -- indexed into a table: a table per take costs more than the scan.
  local hash = redis.call("HGETALL", jobKey)
  local name = opts["name"]
  if name then
    name = tostring(name)
  end
  local processedOnAt, pbAt, atsAt
  for i = 1, #hash, 2 do
    local field = hash[i]
    if field == "processedOn" then
      processedOnAt = i + 1
    elseif field == "ats" then
      atsAt = i + 1
    elseif field == "pb" then
      pbAt = i + 1
    end
  end
  local ats = (tonumber(atsAt and hash[atsAt]) or 0) + 1
  -- A first take is the common one: its text needs no formatting call.
  ats = ats == 1 and "1" or string.format("%d", ats)
  if name then
    redis.call("HMSET", jobKey, "processedOn", timestamp, "pb", name, "ats", ats)
  else
    redis.call("HMSET", jobKey, "processedOn", timestamp, "ats", ats)
  end
  local n = #hash
  if processedOnAt then
    hash[processedOnAt] = timestamp
  else
    hash[n + 1], hash[n + 2] = "processedOn", timestamp
    n = n + 2
  end
  if name then
    if pbAt then
      hash[pbAt] = name
    else
      hash[n + 1], hash[n + 2] = "pb", name
      n = n + 2
    end
  end
  if atsAt then
    hash[atsAt] = ats
  else
    hash[n + 1], hash[n + 2] = "ats", ats
  end

  -- Re-arm unconditionally: another idle worker wakes up and tries the next job.
  -- Member "0" only ever gets score 0 and nothing a finish or a take does
  -- removes it: in a group, the first take's write stands for the others'.
  if not (g and g.marked) then
    redis.call("ZADD", markerKey, "0", "0")
    if g then
      g.marked = true
    end
  end

  return { hash, jobId, 0, 0 }
end
