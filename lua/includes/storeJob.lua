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

  redis.call("HMSET", jobKey, "name", name, "data", data, "opts", jsonOpts, "timestamp", timestamp,
    "delay", delay, "priority", priority, unpack(optional))
  redis.call("XADD", eventsKey, "*", "event", "added", "jobId", jobId, "name", name)
  return delay, priority
end
