--[[
  Read-only snapshot of one queue for the consistency audit: an EchoMQ
  extension, not a BullMQ script. It writes nothing, so running it on a live
  queue is safe, and being one script it is one atomic view — every EchoMQ
  transition is one script too, so hard invariants must hold in it even while
  workers run.

  KEYS[1] the queue prefix {P}
  Returns an array, read by `AuditSnapshot` (echomq-protocol, call/audit.rs).
]]
local p = KEYS[1]
local function zset(name)
  return redis.call("ZRANGE", p .. name, 0, -1, "WITHSCORES")
end
local structural = {"wait", "paused", "active", "prioritized", "delayed", "waiting-children",
  "completed", "failed", "marker", "repeat", "stalled", "stalled-check", "meta", "id", "events", "pc", "limiter"}
local types = {}
for _, s in ipairs(structural) do
  local t = redis.call("TYPE", p .. s)["ok"]
  if t ~= "none" then
    table.insert(types, s)
    table.insert(types, t)
  end
end
local locks = {}
local jobs = {}
local plen = string.len(p)
-- KEYS is acceptable here: the audit is an operator tool bounded to queues of
-- moderate size (atomic mode); paged mode is for larger ones.
for _, k in ipairs(redis.call("KEYS", p .. "*")) do
  local suffix = string.sub(k, plen + 1)
  if string.sub(suffix, -5) == ":lock" then
    table.insert(locks, {string.sub(suffix, 1, -6), redis.call("GET", k) or "", redis.call("PTTL", k)})
  elseif redis.call("TYPE", k)["ok"] == "hash" and redis.call("HEXISTS", k, "timestamp") == 1 then
    local f = redis.call("HMGET", k, "timestamp", "finishedOn", "processedOn", "failedReason",
      "priority", "atm", "ats", "stc", "rjk")
    local row = {suffix, redis.call("PTTL", k)}
    for i = 1, 9 do
      row[i + 2] = f[i] or ""
    end
    table.insert(jobs, row)
  end
end
local xlen, lastId = 0, ""
if redis.call("EXISTS", p .. "events") == 1 and redis.call("TYPE", p .. "events")["ok"] == "stream" then
  xlen = redis.call("XLEN", p .. "events")
  local last = redis.call("XREVRANGE", p .. "events", "+", "-", "COUNT", 1)
  if last[1] then lastId = last[1][1] end
end
local schedulers = {}
local rep = {}
if redis.call("TYPE", p .. "repeat")["ok"] == "zset" then rep = zset("repeat") end
for i = 1, #rep, 2 do
  table.insert(schedulers, {rep[i], rep[i + 1], redis.call("EXISTS", p .. "repeat:" .. rep[i])})
end
local function list(name)
  if redis.call("TYPE", p .. name)["ok"] ~= "list" then return {} end
  return redis.call("LRANGE", p .. name, 0, -1)
end
local function zs(name)
  if redis.call("TYPE", p .. name)["ok"] ~= "zset" then return {} end
  return zset(name)
end
local stalled = {}
if redis.call("TYPE", p .. "stalled")["ok"] == "set" then stalled = redis.call("SMEMBERS", p .. "stalled") end
local meta = {}
if redis.call("TYPE", p .. "meta")["ok"] == "hash" then meta = redis.call("HGETALL", p .. "meta") end
local id = false
if redis.call("TYPE", p .. "id")["ok"] == "string" then id = redis.call("GET", p .. "id") end
return {
  redis.call("TIME"),
  list("wait"), list("paused"), list("active"),
  zs("prioritized"), zs("delayed"), zs("waiting-children"), zs("completed"), zs("failed"), zs("marker"),
  stalled, redis.call("EXISTS", p .. "stalled-check"), id, meta, types, locks, jobs,
  {xlen, lastId}, schedulers
}
