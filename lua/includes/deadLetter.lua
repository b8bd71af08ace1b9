--[[
  Dead letters (EchoMQ extension, docs/operations.md §Dead letters): move a
  job that failed for good from its queue's `failed` set into the dead-letter
  queue's `failed` set, as one fresh job of that queue.

  deadLetter(srcFailedKey, jobKey, jobId, srcQueueKey, dlqPrefix, dlqFailedKey,
             dlqIdKey, dlqEventsKey, dlqMetaKey, now, maxLen) -> dead-letter id | nil
    srcQueueKey   "<prefix>:<source>", recorded as `dlq.queue`
    dlqPrefix     {D}, the dead-letter queue's key prefix
    maxLen        keep at most this many dead letters (0: no bound); the oldest
                  go first, at most 100 per call
  Counts by source and class are kept in {D}dlq:counts (`<source key>\t<class>`).
  nil (nothing written) when the job is not in the source's `failed` set (moved
  already, retried, removed) or belongs to a flow (a child keeps BullMQ's flow
  semantics with its parent).
  The dead letter is the source job's hash (data, opts, name, failedReason,
  stacktrace, attemptsMade, timestamps) without its flow, dedup and scheduler
  links, plus `dlq.queue`, `dlq.id`, `dlq.class` and `dlq.at`. The source job
  is removed: a job is in one place.
]]
--- @include "includes/removeJobKeys"

-- The reason class of a failure: the error class Node (and EchoMQ) writes on
-- the first line of the last stack entry, else the reason's text.
local function deadLetterClass(reason, stacktrace)
  local last = ""
  if stacktrace then
    local ok, traces = pcall(cjson.decode, stacktrace)
    if ok and type(traces) == "table" and #traces > 0 and type(traces[#traces]) == "string" then
      last = traces[#traces]
    end
  end
  reason = reason or ""
  if string.find(last, "^UnrecoverableError") then
    if string.find(reason, "more than allowable limit", 1, true) then
      return "stalled"
    end
    return "unrecoverable"
  end
  if string.find(last, "^TimeoutError") or string.find(reason, "timed out", 1, true) then
    return "timeout"
  end
  if string.find(reason, "more than allowable limit", 1, true) then
    return "stalled"
  end
  if string.find(last, "^CancelledError") or string.find(last, "^AbortError")
    or string.find(reason, "cancelled", 1, true) then
    return "cancelled"
  end
  return "error"
end

local deadLetterSkipped = {
  parentKey = true, parent = true, deid = true, rjk = true, defa = true,
}

local function deadLetter(srcFailedKey, jobKey, jobId, srcQueueKey, dlqPrefix, dlqFailedKey,
                          dlqIdKey, dlqEventsKey, dlqMetaKey, now, maxLen)
  if not redis.call("ZSCORE", srcFailedKey, jobId) then
    return nil
  end
  local flat = redis.call("HGETALL", jobKey)
  if #flat == 0 then
    return nil
  end
  local fields = {}
  local reason, stacktrace
  for i = 1, #flat, 2 do
    local k, v = flat[i], flat[i + 1]
    if k == "parentKey" or k == "parent" then
      return nil
    end
    if not deadLetterSkipped[k] then
      fields[#fields + 1] = k
      fields[#fields + 1] = v
    end
    if k == "failedReason" then reason = v end
    if k == "stacktrace" then stacktrace = v end
  end
  local class = deadLetterClass(reason, stacktrace)
  local id = tostring(redis.call("INCR", dlqIdKey))
  fields[#fields + 1] = "dlq.queue"
  fields[#fields + 1] = srcQueueKey
  fields[#fields + 1] = "dlq.id"
  fields[#fields + 1] = jobId
  fields[#fields + 1] = "dlq.class"
  fields[#fields + 1] = class
  fields[#fields + 1] = "dlq.at"
  fields[#fields + 1] = tostring(now)
  redis.call("HSET", dlqPrefix .. id, unpack(fields))
  redis.call("ZADD", dlqFailedKey, now, id)
  redis.call("HINCRBY", dlqPrefix .. "dlq:counts", srcQueueKey .. "\t" .. class, 1)
  redis.call("ZREM", srcFailedKey, jobId)
  removeJobKeys(jobKey)

  local maxEvents = redis.call("HGET", dlqMetaKey, "opts.maxLenEvents")
  if not maxEvents then
    maxEvents = "10000"
    redis.call("HSET", dlqMetaKey, "opts.maxLenEvents", maxEvents)
  end
  redis.call("XADD", dlqEventsKey, "MAXLEN", "~", maxEvents, "*", "event", "deadLettered", "jobId", id,
    "queue", srcQueueKey, "sourceId", jobId, "class", class)

  maxLen = tonumber(maxLen) or 0
  if maxLen > 0 then
    local over = redis.call("ZCARD", dlqFailedKey) - maxLen
    if over > 0 then
      if over > 100 then over = 100 end
      local oldest = redis.call("ZRANGE", dlqFailedKey, 0, over - 1)
      for _, old in ipairs(oldest) do
        local from = redis.call("HMGET", dlqPrefix .. old, "dlq.queue", "dlq.class")
        if from[1] and from[2] then
          redis.call("HINCRBY", dlqPrefix .. "dlq:counts", from[1] .. "\t" .. from[2], -1)
        end
        removeJobKeys(dlqPrefix .. old)
      end
      redis.call("ZREM", dlqFailedKey, unpack(oldest))
    end
  end
  return id
end
