--[[
  H10 add side: decide whether an add carrying `opts.de` goes ahead.
  deduplicateJob(prefix, deduplicationOpts, jobId, deduplicationKey,
                 delayedKey, eventsKey, maxEvents, job) -> owner id or nil
    deduplicationOpts  opts.de ({id, ttl?, extend?, replace?, keepLastIfActive?})
    jobId              the id the new job would get (N)
    job                {name, data, opts, parentKey, parentData,
                        parentDependenciesKey, repeatJobKey} of the new add,
                       needed to park it as "dedup next"
  nil means: store the new job; an id means: the add is dropped in favour of
  that owner. With `reschedule`, a dropped add moves a still delayed owner to
  its own due time (`timestamp + delay` of the add).
  setDeduplicationKey(deduplicationKey, ownerId, deduplicationOpts)
  storeDeduplicatedNextJob(prefix, deduplicationKey, deduplicationOpts,
                           ownerId, jobId, job, eventsKey, maxEvents) -> bool
  recoverStaleDeduplicationKey(prefix, deduplicationKey, ownerId, jobId,
                               deduplicationOpts) -> bool
]]
--- @include "includes/addDelayedJobToSet"
--- @include "includes/removeJobKeys"

local function setDeduplicationKey(deduplicationKey, ownerId, deduplicationOpts)
  local ttl = tonumber(deduplicationOpts["ttl"])
  -- With keepLastIfActive the key must outlive an owner that runs longer than ttl.
  if deduplicationOpts["keepLastIfActive"] then
    redis.call("SET", deduplicationKey, ownerId)
  elseif ttl and ttl > 0 then
    redis.call("SET", deduplicationKey, ownerId, "PX", ttl)
  else
    redis.call("SET", deduplicationKey, ownerId)
  end
end

local function emitDeduplicated(eventsKey, maxEvents, ownerId, deduplicationId, droppedId)
  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "deduplicated",
    "jobId", ownerId, "deduplicationId", deduplicationId, "deduplicatedJobId", droppedId)
end

-- keepLastIfActive: while the owner runs, the latest dropped add is parked in
-- {P}dn:<id> and becomes a real job when the owner finishes.
local function storeDeduplicatedNextJob(prefix, deduplicationKey, deduplicationOpts, ownerId, jobId, job,
                                        eventsKey, maxEvents)
  if not deduplicationOpts["keepLastIfActive"] or not ownerId then
    return false
  end
  if not redis.call("LPOS", prefix .. "active", ownerId) then
    return false
  end
  local deduplicationId = deduplicationOpts["id"]
  local nextKey = prefix .. "dn:" .. deduplicationId
  local fields = { "name", job.name, "data", job.data, "opts", cjson.encode(job.opts), "jid", jobId }
  if job.parentKey ~= nil then
    table.insert(fields, "pk")
    table.insert(fields, job.parentKey)
  end
  if job.parentData ~= nil then
    table.insert(fields, "pd")
    table.insert(fields, job.parentData)
  end
  if job.parentDependenciesKey ~= nil then
    table.insert(fields, "pdk")
    table.insert(fields, job.parentDependenciesKey)
  end
  if job.repeatJobKey ~= nil then
    table.insert(fields, "rjk")
    table.insert(fields, job.repeatJobKey)
  end
  redis.call("DEL", nextKey)
  redis.call("HSET", nextKey, unpack(fields))
  redis.call("PERSIST", deduplicationKey)
  emitDeduplicated(eventsKey, maxEvents, ownerId, deduplicationId, jobId)
  return true
end

-- A key without expiry lives until its owner finishes. An owner whose hash is
-- gone (lost to an outage) never will: the key is stale, and the incoming add
-- takes it over and is stored, with no `deduplicated` event. Whatever was
-- parked for the lost owner goes too, or it would come back as an extra job.
local function recoverStaleDeduplicationKey(prefix, deduplicationKey, ownerId, jobId, deduplicationOpts)
  if not ownerId or redis.call("PTTL", deduplicationKey) ~= -1
      or redis.call("EXISTS", prefix .. ownerId) == 1 then
    return false
  end
  redis.call("DEL", deduplicationKey)
  redis.call("DEL", prefix .. "dn:" .. deduplicationOpts["id"])
  setDeduplicationKey(deduplicationKey, jobId, deduplicationOpts)
  return true
end

-- The modes that only drop or keep an add (every one but replace): nil or
-- the owner's id, as deduplicateJob answers.
local function deduplicateWithoutReplace(prefix, deduplicationOpts, jobId, deduplicationKey, eventsKey,
                                         maxEvents, job)
  local deduplicationId = deduplicationOpts["id"]
  local ttl = tonumber(deduplicationOpts["ttl"])
  local keepLastIfActive = deduplicationOpts["keepLastIfActive"]

  if ttl and ttl > 0 and deduplicationOpts["extend"] then
    local ownerId = redis.call("GET", deduplicationKey)
    if not ownerId then
      setDeduplicationKey(deduplicationKey, jobId, deduplicationOpts)
      return nil
    end
    if recoverStaleDeduplicationKey(prefix, deduplicationKey, ownerId, jobId, deduplicationOpts) then
      return nil
    end
    if storeDeduplicatedNextJob(prefix, deduplicationKey, deduplicationOpts, ownerId, jobId, job, eventsKey,
        maxEvents) then
      return ownerId
    end
    -- Debounce: every dropped add restarts the window of the owner.
    setDeduplicationKey(deduplicationKey, ownerId, deduplicationOpts)
    emitDeduplicated(eventsKey, maxEvents, ownerId, deduplicationId, jobId)
    return ownerId
  end

  local claimed
  if ttl and ttl > 0 and not keepLastIfActive then
    claimed = redis.call("SET", deduplicationKey, jobId, "PX", ttl, "NX")
  else
    claimed = redis.call("SET", deduplicationKey, jobId, "NX")
  end
  if claimed then
    return nil
  end

  local ownerId = redis.call("GET", deduplicationKey)
  if recoverStaleDeduplicationKey(prefix, deduplicationKey, ownerId, jobId, deduplicationOpts) then
    return nil
  end
  if storeDeduplicatedNextJob(prefix, deduplicationKey, deduplicationOpts, ownerId, jobId, job, eventsKey,
      maxEvents) then
    return ownerId
  end
  emitDeduplicated(eventsKey, maxEvents, ownerId, deduplicationId, jobId)
  return ownerId
end

local function deduplicateJob(prefix, deduplicationOpts, jobId, deduplicationKey, delayedKey, eventsKey,
                              maxEvents, job)
  local deduplicationId = deduplicationOpts["id"]

  if deduplicationOpts["replace"] then
    local ttl = tonumber(deduplicationOpts["ttl"])
    local ownerId = redis.call("GET", deduplicationKey)
    if not ownerId then
      setDeduplicationKey(deduplicationKey, jobId, deduplicationOpts)
      return nil
    end
    if redis.call("ZREM", delayedKey, ownerId) == 1 then
      -- The owner has not started yet: the new add replaces it.
      removeJobKeys(prefix .. ownerId)
      redis.call("XADD", eventsKey, "*", "event", "removed", "jobId", ownerId, "prev", "delayed")
      emitDeduplicated(eventsKey, maxEvents, jobId, deduplicationId, ownerId)
      -- A next job parked while the replaced owner ran belongs to it: it
      -- must not come back when the new add finishes.
      redis.call("DEL", prefix .. "dn:" .. deduplicationId)
      if not deduplicationOpts["keepLastIfActive"] and not deduplicationOpts["extend"] and ttl and ttl > 0 then
        -- A plain replace must not prolong the original deduplication window.
        redis.call("SET", deduplicationKey, jobId, "KEEPTTL")
      else
        setDeduplicationKey(deduplicationKey, jobId, deduplicationOpts)
      end
      return nil
    end
    if recoverStaleDeduplicationKey(prefix, deduplicationKey, ownerId, jobId, deduplicationOpts) then
      return nil
    end
    storeDeduplicatedNextJob(prefix, deduplicationKey, deduplicationOpts, ownerId, jobId, job, eventsKey,
      maxEvents)
    return ownerId
  end

  local ownerId = deduplicateWithoutReplace(prefix, deduplicationOpts, jobId, deduplicationKey, eventsKey,
    maxEvents, job)
  if ownerId and deduplicationOpts["reschedule"] and redis.call("ZSCORE", delayedKey, ownerId) then
    -- The owner keeps its id, data and options; only its due time moves.
    local delay = tonumber(job.opts["delay"]) or 0
    redis.call("HSET", prefix .. ownerId, "delay", delay)
    addDelayedJobToSet(delayedKey, eventsKey, prefix .. "marker", maxEvents, ownerId, job.timestamp, delay)
  end
  return ownerId
end
