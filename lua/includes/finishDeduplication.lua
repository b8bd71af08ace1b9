--[[
  H10 on finalization (moveToFinished) for a job with `deid`.
  removeDeduplicationKeyOnFinish(deduplicationKey, jobId)
    frees the id unless a positive TTL still runs (then it simply expires);
    a key without TTL is only freed by its own owner.
  requeueDeduplicatedNextJob(prefix, deduplicationId, deduplicationKey,
                             timestamp, maxEvents)
    turns the parked "dedup next" proto-job into a real job that becomes the
    new owner; `timestamp` (the finishing time) is its creation time.
]]
--- @include "includes/deduplicateJob"
--- @include "includes/storeAndEnqueueJob"

local function removeDeduplicationKeyOnFinish(deduplicationKey, jobId)
  local ttl = redis.call("PTTL", deduplicationKey)
  if ttl == 0 then
    redis.call("DEL", deduplicationKey)
  elseif ttl == -1 and redis.call("GET", deduplicationKey) == jobId then
    redis.call("DEL", deduplicationKey)
  end
end

local function requeueDeduplicatedNextJob(prefix, deduplicationId, deduplicationKey, timestamp, maxEvents)
  local nextKey = prefix .. "dn:" .. deduplicationId
  if redis.call("EXISTS", nextKey) ~= 1 then
    return
  end
  local stored = redis.call("HMGET", nextKey, "name", "data", "opts", "jid", "pk", "pd", "pdk", "rjk")
  local counter = redis.call("INCR", prefix .. "id")
  local jobId = stored[4] or string.format("%d", counter)
  local opts = cjson.decode(stored[3] or "{}")

  setDeduplicationKey(deduplicationKey, jobId, opts["de"] or {})

  local parentKey = stored[5] or nil
  local parentData = stored[6] or nil
  local repeatJobKey = stored[8] or nil
  storeAndEnqueueJob(prefix, jobId, stored[1], stored[2], opts, timestamp, parentKey, parentData,
    repeatJobKey, maxEvents)
  if stored[7] then
    redis.call("SADD", stored[7], prefix .. jobId)
  end
  redis.call("DEL", nextKey)
end
