--[[
  moveStalledJobsToWait: the stalled-job check (docs/protocol.md §Stalled jobs with the
  8-key layout of docs/decisions.md §1 Script names). Jobs marked by the previous check whose
  lock has since expired go back to wait; then every active job is marked
  for the next check. A job stalled more than maxStalledCount times gets
  `defa`, so the next worker fails it without running it; job scheduler
  iterations never do.

  KEYS
    1 {P}stalled  2 {P}wait      3 {P}active   4 {P}stalled-check
    5 {P}meta     6 {P}marker    7 {P}events   8 {P}repeat
  ARGV
    1 maxStalledCount
    2 {P}
    3 now (ms)
    4 stalled interval (ms): TTL of the throttle key
  Returns
    the ids recovered by this call (empty when throttled).
  Events: waiting {prev active} then stalled, per recovered job.
]]
--- @include "includes/addJobInTargetList"
--- @include "includes/batches"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/trimEvents"

local stalledKey = KEYS[1]
local waitKey = KEYS[2]
local activeKey = KEYS[3]
local metaKey = KEYS[5]
local markerKey = KEYS[6]
local eventsKey = KEYS[7]
local repeatKey = KEYS[8]
local maxStalledCount = tonumber(ARGV[1])
local prefix = ARGV[2]

-- One effective check per interval across every worker of the queue.
if redis.call("EXISTS", KEYS[4]) == 1 then
  return {}
end
redis.call("SET", KEYS[4], ARGV[3], "PX", ARGV[4])

trimEvents(metaKey, eventsKey)

local recovered = {}
local candidates = redis.call("SMEMBERS", stalledKey)
if #candidates > 0 then
  redis.call("DEL", stalledKey)
  for _, jobId in ipairs(candidates) do
    if string.sub(jobId, 1, 2) == "0:" then
      redis.call("LREM", activeKey, 1, jobId)
    else
      local jobKey = prefix .. jobId
      -- A job whose lock exists is alive; it just leaves the candidate set.
      if redis.call("EXISTS", jobKey .. ":lock") == 0 and redis.call("LREM", activeKey, 1, jobId) > 0 then
        local stalledCount = redis.call("HINCRBY", jobKey, "stc", 1)

        local isSchedulerJob = false
        local schedulerId = redis.call("HGET", jobKey, "rjk")
        if schedulerId then
          isSchedulerJob = redis.call("EXISTS", prefix .. "repeat:" .. schedulerId) == 1 or
            redis.call("ZSCORE", repeatKey, schedulerId) ~= false
        end

        if stalledCount > maxStalledCount and not isSchedulerJob then
          redis.call("HSET", jobKey, "defa", "job stalled more than allowable limit")
        end

        local isPausedOrMaxed = isQueuePausedOrMaxed(metaKey, activeKey)
        addJobInTargetList(waitKey, markerKey, "RPUSH", isPausedOrMaxed, jobId)
        redis.call("XADD", eventsKey, "*", "event", "waiting", "jobId", jobId, "prev", "active")
        redis.call("XADD", eventsKey, "*", "event", "stalled", "jobId", jobId)
        table.insert(recovered, jobId)
      end
    end
  end
end

local active = redis.call("LRANGE", activeKey, 0, -1)
for from, to in batches(#active, 7000) do
  redis.call("SADD", stalledKey, unpack(active, from, to))
end

return recovered
