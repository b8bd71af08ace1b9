--[[
  replayDeadLetter: put one dead letter back in its source queue as a fresh
  job, and remove it from the dead-letter queue, in one call (EchoMQ
  extension, docs/protocol.md §Dead letters): a replay stopped anywhere and
  run again never doubles nor loses a job.

  KEYS
    1 {D}failed   2 {D}events
    3 {S}wait     4 {S}meta      5 {S}active   6 {S}prioritized
    7 {S}pc       8 {S}events    9 {S}marker
  ARGV
    1 dead letter id
    2 {D}
    3 {S}
    4 source queue key "<prefix>:<queue>" the dead letter must name
  The job keeps its source id, name, data and options, except `delay` (it is
  ready now), `attempts` made (reset: a fresh job), and its dedup and
  scheduler links. Its timestamp is now (Redis's clock).
  Returns
    the job id in the source queue; 0 not a dead letter (replayed already,
    removed); -1 it names another source queue; -2 the source queue does not
    exist (no meta hash); -3 the source queue holds a job with that id.
  Events: added, waiting on {S}events; replayed on {D}events.
]]
--- @include "includes/addJobInTargetList"
--- @include "includes/addJobWithPriority"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/removeJobKeys"
--- @include "includes/storeJob"

local dlqId = ARGV[1]
if not redis.call("ZSCORE", KEYS[1], dlqId) then
  return 0
end
local dlqKey = ARGV[2] .. dlqId
local h = redis.call("HMGET", dlqKey, "dlq.queue", "dlq.id", "name", "data", "opts", "dlq.class")
if h[1] ~= ARGV[4] or not h[2] then
  return -1
end
if redis.call("EXISTS", KEYS[4]) == 0 then
  return -2
end
local jobId = h[2]
local jobKey = ARGV[3] .. jobId
if redis.call("EXISTS", jobKey) == 1 then
  return -3
end

local opts = {}
if h[5] then
  local ok, decoded = pcall(cjson.decode, h[5])
  if ok and type(decoded) == "table" then opts = decoded end
end
opts["delay"] = nil
opts["de"] = nil
opts["repeat"] = nil
opts["jobId"] = nil
opts["parent"] = nil

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local _, priority = storeJob(KEYS[8], jobKey, jobId, h[3] or "", h[4] or "{}", opts, now, nil, nil, nil)
local pausedOrMaxed = isQueuePausedOrMaxed(KEYS[4], KEYS[5])
if priority == 0 then
  local pushCmd = opts["lifo"] and "RPUSH" or "LPUSH"
  addJobInTargetList(KEYS[3], KEYS[9], pushCmd, pausedOrMaxed, jobId)
else
  addJobWithPriority(KEYS[9], KEYS[6], priority, jobId, KEYS[7], pausedOrMaxed)
end
local maxEvents = redis.call("HGET", KEYS[4], "opts.maxLenEvents") or "10000"
redis.call("XADD", KEYS[8], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)

redis.call("ZREM", KEYS[1], dlqId)
if h[6] then
  redis.call("HINCRBY", ARGV[2] .. "dlq:counts", h[1] .. "\t" .. h[6], -1)
end
removeJobKeys(dlqKey)
redis.call("XADD", KEYS[2], "*", "event", "replayed", "jobId", dlqId, "queue", ARGV[4], "sourceId", jobId)
return jobId
