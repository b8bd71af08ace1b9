--[[
  auditHead: EchoMQ extension, read-only (docs/stalled-checker.md §Audit). The
  first call of a paged audit: what is O(1) to read about a queue, in one
  atomic view — the server time, the type and size of every structural key,
  the meta hash, the id counter, the marker, the events stream's length.
  The jobs, locks and keys themselves are read by auditPage and auditKeys,
  a bounded page per call.

  KEYS[1] the queue prefix {P}
  Returns {TIME, {suffix, type, size, ...}, meta (flat), id or false,
    marker (flat member, score; at most 10), stalled-check exists,
    events length}.
]]
local p = KEYS[1]
local structural = {"wait", "paused", "active", "prioritized", "delayed", "waiting-children",
  "completed", "failed", "marker", "repeat", "stalled", "stalled-check", "meta", "id", "events",
  "pc", "limiter"}
local sizeOf = {list = "LLEN", zset = "ZCARD", set = "SCARD", hash = "HLEN", stream = "XLEN"}
local types = {}
for _, s in ipairs(structural) do
  local t = redis.call("TYPE", p .. s)["ok"]
  if t ~= "none" then
    local size = 1
    if sizeOf[t] then
      size = redis.call(sizeOf[t], p .. s)
    end
    types[#types + 1] = s
    types[#types + 1] = t
    types[#types + 1] = size
  end
end
local function typeIs(name, t)
  return redis.call("TYPE", p .. name)["ok"] == t
end
local meta = {}
-- A meta hash is a handful of fields; one written with thousands is not
-- read whole (the audit reports its size through the types above).
if typeIs("meta", "hash") and redis.call("HLEN", p .. "meta") <= 100 then
  meta = redis.call("HGETALL", p .. "meta")
end
local id = false
if typeIs("id", "string") then
  id = redis.call("GET", p .. "id")
end
local marker = {}
if typeIs("marker", "zset") then
  marker = redis.call("ZRANGE", p .. "marker", 0, 9, "WITHSCORES")
end
local events = 0
if typeIs("events", "stream") then
  events = redis.call("XLEN", p .. "events")
end
return {redis.call("TIME"), types, meta, id, marker, redis.call("EXISTS", p .. "stalled-check"), events}
