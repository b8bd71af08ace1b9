--[[
  auditPage: EchoMQ extension, read-only (docs/stalled-checker.md §Audit). One
  page of one state structure, with what the audit checks about each id, read
  in one atomic view: its job hash fields, whether it has a lock, and which
  other sorted-set states hold it too. A page of `count` ids costs about
  eight commands per id, whatever the queue holds.

  KEYS[1] the queue prefix {P}
  ARGV[1] the structure: wait, paused, active (lists, paged from the tail,
          where the oldest ids are), prioritized, delayed, waiting-children,
          completed, failed (sorted sets, lowest score first), or repeat
          (the schedulers)
  ARGV[2] position of the first id of the page
  ARGV[3] ids in the page
  Returns {id counter or false, size of the structure now, rows}; a row is
    {id, score or "", hash PTTL (-2: no hash), timestamp, finishedOn,
     processedOn, failedReason, priority, atm, ats, stc, rjk, lock PTTL
     (-2: no lock), the other sorted-set states holding it, comma-separated};
    for repeat, {id, score, 1 when {P}repeat:<id> exists else 0}.
]]
local p = KEYS[1]
local state = ARGV[1]
local from = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local key = p .. state
local isList = state == "wait" or state == "paused" or state == "active"
local t = redis.call("TYPE", key)["ok"]
local expected = isList and "list" or "zset"
local counter = false
if redis.call("TYPE", p .. "id")["ok"] == "string" then
  counter = redis.call("GET", p .. "id")
end
if t ~= expected then
  return {counter, 0, {}}
end

local ids, scores = {}, {}
local size
if isList then
  size = redis.call("LLEN", key)
  if from < size then
    local page = redis.call("LRANGE", key, -(from + count), -(from + 1))
    for i = #page, 1, -1 do
      ids[#ids + 1] = page[i]
    end
  end
else
  size = redis.call("ZCARD", key)
  local page = redis.call("ZRANGE", key, from, from + count - 1, "WITHSCORES")
  for i = 1, #page, 2 do
    ids[#ids + 1] = page[i]
    scores[#scores + 1] = page[i + 1]
  end
end

local rows = {}
if state == "repeat" then
  for i, id in ipairs(ids) do
    rows[i] = {id, scores[i], redis.call("EXISTS", p .. "repeat:" .. id)}
  end
  return {counter, size, rows}
end

local sets = {"prioritized", "delayed", "waiting-children", "completed", "failed"}
for i, id in ipairs(ids) do
  local jobKey = p .. id
  local row = {id, scores[i] or "", redis.call("PTTL", jobKey)}
  local f = {}
  if row[3] ~= -2 then
    f = redis.call("HMGET", jobKey, "timestamp", "finishedOn", "processedOn", "failedReason",
      "priority", "atm", "ats", "stc", "rjk")
  end
  for j = 1, 9 do
    row[3 + j] = f[j] or ""
  end
  row[13] = redis.call("PTTL", jobKey .. ":lock")
  local others = {}
  for _, s in ipairs(sets) do
    if s ~= state and redis.call("ZSCORE", p .. s, id) then
      others[#others + 1] = s
    end
  end
  row[14] = table.concat(others, ",")
  rows[i] = row
end
return {counter, size, rows}
