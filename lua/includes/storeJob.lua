--[[
  H8: write the job hash and announce it.
  storeJob(eventsKey, jobKey, jobId, name, data, opts, timestamp, parentKey,
           parentData, repeatJobKey) -> delay, priority
    opts        decoded JobOpts table; stored through cjson (the stored form
                clients expect, with cjson's key order and number format)
    parentData  parent descriptor already encoded as JSON, or nil
  Field order matters for HGETALL readers comparing dumps, so it is fixed.
]]
local function storeJob(eventsKey, jobKey, jobId, name, data, opts, timestamp, parentKey, parentData,
                        repeatJobKey)
  local jsonOpts = cjson.encode(opts)
  local delay = opts["delay"] or 0
  local priority = opts["priority"] or 0
  local deduplicationId = opts["de"] and opts["de"]["id"]

  -- Zeros and the timestamp go to Redis as text (a Lua number argument costs
  -- a float formatting), with the bytes that formatting would have produced.
  local delayArg = delay == 0 and "0" or delay
  local priorityArg = priority == 0 and "0" or priority
  local timestampArg = timestamp
  if type(timestamp) == "number" and timestamp == math.floor(timestamp) and timestamp >= 0
    and timestamp < 1e15 then
    timestampArg = string.format("%d", timestamp)
  end

  if parentKey == nil and repeatJobKey == nil and deduplicationId == nil then
    redis.call("HMSET", jobKey, "name", name, "data", data, "opts", jsonOpts, "timestamp", timestampArg,
      "delay", delayArg, "priority", priorityArg)
  else
    local optional = {}
    if parentKey ~= nil then
      table.insert(optional, "parentKey")
      table.insert(optional, parentKey)
      table.insert(optional, "parent")
      table.insert(optional, parentData)
    end
    if repeatJobKey ~= nil then
      table.insert(optional, "rjk")
      table.insert(optional, repeatJobKey)
    end
    if deduplicationId ~= nil then
      table.insert(optional, "deid")
      table.insert(optional, deduplicationId)
    end
    redis.call("HMSET", jobKey, "name", name, "data", data, "opts", jsonOpts, "timestamp", timestampArg,
      "delay", delayArg, "priority", priorityArg, unpack(optional))
  end
  redis.call("XADD", eventsKey, "*", "event", "added", "jobId", jobId, "name", name)
  return delay, priority
end
