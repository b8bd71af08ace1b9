--[[
  The body of one moveToFinished, shared by moveToFinished-14 (one job) and
  moveJobsToFinished-15 (several in one call, docs/protocol.md §Extensions):
  one Lua text, so the two cannot drift.
  finishJob(K, targetKey, jobKey, metricsKey, A, opts, g) -> reply
    K           the fixed keys by moveToFinished's KEYS positions: 1 wait,
                2 active, 3 prioritized, 4 events, 5 stalled, 6 limiter,
                7 delayed, 8 paused, 9 meta, 10 pc, 14 marker
    targetKey   {P}completed | {P}failed (KEYS[11])
    jobKey      {P}<id> (KEYS[12])
    metricsKey  {P}metrics:completed | {P}metrics:failed (KEYS[13])
    A           moveToFinished's ARGV, 1 to 9 (8 unread when opts is given)
    opts        A[8] unpacked, or nil (a group unpacks the FinishOpts its
                entries share once, docs/decisions.md §16)
    g           a group's state (includes/groupWrites), or nil: a plain
                job's SREM of stalled and ZADD of its target set wait for
                the group's end, and the group's cached reads stand for its
                own; a job of a flow, with a deduplication id or with
                retention flushes them first and writes its own at once
  Returns what moveToFinished returns: 0, a next-job reply or a code.
]]
--- @include "includes/fetchNextJob"
--- @include "includes/removeJobKeys"
--- @include "includes/removeLock"
--- @include "includes/updateJobFields"

-- Every `local function` statement a call runs allocates a closure, and most
-- finishes are plain jobs: the helpers of flows, DAG hand-overs,
-- deduplication, retention and metrics are created by this loader, on the
-- paths that need them only.
local function rareHelpers()
  --- @include "includes/collectMetrics"
  --- @include "includes/finishDeduplication"
  --- @include "includes/moveParentToWait"
  --- @include "includes/removeJobsByRetention"
  --- @include "includes/removeParentDependencyKey"
  --- @include "includes/updateParentOnChildFinish"
  --- @include "includes/releaseDagParents"
  return {
    collectMetrics = collectMetrics,
    getParentPrefixAndId = getParentPrefixAndId,
    removeDeduplicationKeyOnFinish = removeDeduplicationKeyOnFinish,
    removeJobsByMaxAge = removeJobsByMaxAge,
    removeJobsByMaxCount = removeJobsByMaxCount,
    releaseDagParents = releaseDagParents,
    removeParentDependencyKey = removeParentDependencyKey,
    requeueDeduplicatedNextJob = requeueDeduplicatedNextJob,
    updateParentOnChildCompleted = updateParentOnChildCompleted,
    updateParentOnChildFailed = updateParentOnChildFailed,
  }
end
local rare = nil

local function finishJob(K, targetKey, jobKey, metricsKey, A, opts, g)
  local jobId = A[1]
  local timestamp = A[2]
  local field = A[3]
  local value = A[4]
  local target = A[5]
  local prefix = A[7]

  -- One read answers "does the job exist" (every take writes processedOn; EXISTS
  -- decides only when it is absent) and gives the attributes used below.
  local attributes = redis.call("HMGET", jobKey, "parentKey", "parent", "deid", "atm", "processedOn")
  if not attributes[5] and redis.call("EXISTS", jobKey) ~= 1 then
    return -1
  end

  -- A parent may only complete once every child is done and none failed it.
  -- Redis keeps no empty set, so one EXISTS rules both out for a plain job.
  -- A group that found none for any of its jobs skips the read (groupWrites).
  if target == "completed" and not (g and g.noChildren)
    and redis.call("EXISTS", jobKey .. ":dependencies", jobKey .. ":unsuccessful") ~= 0 then
    if redis.call("SCARD", jobKey .. ":dependencies") ~= 0 then
      return -4
    end
    if redis.call("ZCARD", jobKey .. ":unsuccessful") ~= 0 then
      return -9
    end
  end

  opts = opts or cmsgpack.unpack(A[8])

  local lockResult = removeLock(jobKey, K[5], opts["token"], jobId, g)
  if lockResult < 0 then
    return lockResult
  end

  if A[9] ~= nil and A[9] ~= "" then
    updateJobFields(jobKey, A[9])
    -- The worker's fields may include any of the attributes.
    attributes = redis.call("HMGET", jobKey, "parentKey", "parent", "deid", "atm", "processedOn")
  end
  local parentKey = attributes[1] or nil
  local parent = nil
  if attributes[2] then
    parent = cjson.decode(attributes[2])
  end
  local deduplicationId = attributes[3] or nil

  local parentPrefix, parentId
  if parentKey ~= nil or (parent ~= nil and type(parent) == "table") then
    if parentKey == nil then
      parentKey = parent["queueKey"] .. ":" .. parent["id"]
    end
    rare = rare or rareHelpers()
    parentPrefix, parentId = rare.getParentPrefixAndId(parentKey, parent)
  end

  -- Removing the tail-most occurrence matches where a fresh take lands last.
  if redis.call("LREM", K[2], "-1", jobId) == 0 then
    return -3
  end

  -- meta is read once per finish: the events bound here, and what
  -- fetch-next needs (pause, concurrency, global rate limit), which nothing
  -- below writes. A group reads it once: no finish writes those fields but
  -- opts.maxLenEvents when it is missing, and that write is kept in the read.
  local meta = g and g.meta
  if not meta then
    meta = redis.call("HMGET", K[9], "paused", "concurrency", "max", "duration", "opts.maxLenEvents")
  end
  -- getOrSetMaxEvents on the value just read; a group converts it once.
  local maxEvents = g and g.maxEvents
  if not maxEvents then
    maxEvents = meta[5]
    if not maxEvents then
      maxEvents = 10000
      redis.call("HSET", K[9], "opts.maxLenEvents", maxEvents)
      meta[5] = "10000"
    end
    maxEvents = tonumber(maxEvents)
    if g then
      g.maxEvents = maxEvents
    end
  end
  if g then
    g.meta = meta
  end

  -- A missing keepJobs keeps every job (EchoMQ leaves the default out).
  local keepJobs = opts["keepJobs"]
  local maxCount = keepJobs and tonumber(keepJobs["count"])
  local maxAge = keepJobs and keepJobs["age"]

  -- The stream is trimmed before this call's events (BullMQ's order). When the
  -- final event is the first entry this call appends, that XADD trims instead,
  -- with MAXLEN ~ maxEvents + 1: Redis drops the same whole nodes from a stream
  -- one entry longer as XTRIM MAXLEN ~ maxEvents did before the append. Flows,
  -- deduplication and retention by age or count may append first (a parent's or
  -- a requeued job's events), so they keep the separate XTRIM.
  local retentionRemoves = maxCount ~= 0 and (maxAge ~= nil or (maxCount ~= nil and maxCount > 0))
  local trimOnEvent = deduplicationId == nil and parentKey == nil and not retentionRemoves
    and maxEvents ~= nil and maxEvents >= 1 and maxEvents == math.floor(maxEvents)
  if not trimOnEvent then
    redis.call("XTRIM", K[4], "MAXLEN", "~", maxEvents)
  end

  -- Flows, deduplication and retention read and write sets a group defers
  -- (the target set, delayed): the group's writes are made before them.
  local deferring = g ~= nil and deduplicationId == nil and parentKey == nil and not retentionRemoves
  if g and not deferring then
    g.flush(g, K[5])
  end

  if deduplicationId ~= nil then
    local deduplicationKey = prefix .. "de:" .. deduplicationId
    rare = rare or rareHelpers()
    rare.removeDeduplicationKeyOnFinish(deduplicationKey, jobId)
    rare.requeueDeduplicatedNextJob(prefix, deduplicationId, deduplicationKey, timestamp, maxEvents)
  end

  if parentKey ~= nil then
    if target == "completed" then
      rare.updateParentOnChildCompleted(parentKey, parentPrefix, parentId, jobKey, value, timestamp)
    else
      rare.updateParentOnChildFailed(parentKey, parentPrefix, parentId, parent, jobKey, value, timestamp)
    end
  end

  -- attempts made, counted here rather than by HINCRBY: the HSET below writes
  -- it with the other fields (first, where HINCRBY created it), and a removed
  -- job needs no write at all.
  local attemptsMade = (tonumber(attributes[4]) or 0) + 1

  if maxCount == 0 then
    removeJobKeys(jobKey)
    if parentKey ~= nil then
      rare.removeParentDependencyKey(jobKey, false, parentKey, prefix)
    end
  else
    if deferring then
      g.zadd(g, targetKey, timestamp, jobId)
    else
      redis.call("ZADD", targetKey, timestamp, jobId)
    end
    -- Integers go to Redis as text: a Lua number costs a float formatting.
    -- Most jobs finish at their first attempt: its text needs no formatting call.
    redis.call("HSET", jobKey, "atm", attemptsMade == 1 and "1" or string.format("%d", attemptsMade), field, value,
      "finishedOn", timestamp)
    if target == "failed" then
      -- The deferred failure has now happened.
      redis.call("HDEL", jobKey, "defa")
    end
    if maxAge ~= nil then
      rare = rare or rareHelpers()
      rare.removeJobsByMaxAge(timestamp, maxAge, targetKey, prefix, keepJobs["limit"])
    end
    if maxCount ~= nil and maxCount > 0 then
      rare = rare or rareHelpers()
      rare.removeJobsByMaxCount(maxCount, targetKey, prefix)
    end
  end

  if trimOnEvent then
    -- A group formats the bound once: it comes from meta, read once per group.
    local trimLen = g and g.trimLen
    if not trimLen then
      trimLen = string.format("%d", maxEvents + 1)
      if g then
        g.trimLen = trimLen
      end
    end
    redis.call("XADD", K[4], "MAXLEN", "~", trimLen, "*", "event", target, "jobId", jobId, field, value,
      "prev", "active")
  else
    redis.call("XADD", K[4], "*", "event", target, "jobId", jobId, field, value, "prev", "active")
  end

  if target == "failed" then
    if attemptsMade >= (tonumber(opts["attempts"]) or 0) then
      redis.call("XADD", K[4], "*", "event", "retries-exhausted", "jobId", jobId, "attemptsMade", attemptsMade)
    end
  end

  local maxMetricsSize = opts["maxMetricsSize"]
  if maxMetricsSize ~= nil and maxMetricsSize ~= "" then
    rare = rare or rareHelpers()
    rare.collectMetrics(metricsKey, metricsKey .. ":data", maxMetricsSize, timestamp)
  end

  if A[6] == "1" then
    local reply = fetchNextJob(K[1], K[2], K[3], K[4], K[6], K[7], K[9], K[10], K[14],
      prefix, timestamp, opts, false, meta, g)
    if reply ~= nil then
      return reply
    end
  end

  if redis.call("LLEN", K[1]) == 0 and redis.call("LLEN", K[2]) == 0 and redis.call("ZCARD", K[3]) == 0 then
    redis.call("XADD", K[4], "*", "event", "drained")
  end

  return 0
end
