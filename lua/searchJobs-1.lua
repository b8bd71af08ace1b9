--[[
  searchJobs (EchoMQ extension): one page of a scan of a state that keeps,
  on the server, only the jobs with a given name and/or whose data contains a
  text (docs/protocol.md §Reading jobs). Read-only.

  KEYS
    1 {P} (the queue's key prefix)
  ARGV
    1 state key suffix (wait, paused, active, delayed, prioritized,
      completed, failed, waiting-children)
    2 cursor: index of the first id to read (0 to start)
    3 how many ids to read in this call
    4 "1" ascending (oldest first) | "0" newest first
    5 job name to match exactly, or "" for any
    6 text the data must contain (plain, not a pattern), or "" for any
  Returns
    {next cursor or -1 when the state is exhausted, {{id, {field, value, ...}}, ...}}
]]
local prefix = KEYS[1]
local state = ARGV[1]
local cursor = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local ascending = ARGV[4] == "1"
local name = ARGV[5]
local text = ARGV[6]
local key = prefix .. state
local last = cursor + count - 1

local ids
if state == "wait" or state == "paused" or state == "active" then
  if ascending then
    -- Lists hold the newest at the head: an ascending page is read from the tail.
    local length = redis.call("LLEN", key)
    if cursor >= length then
      ids = {}
    else
      local fromTail = redis.call("LRANGE", key, -(last + 1), -(cursor + 1))
      ids = {}
      for i = #fromTail, 1, -1 do
        ids[#ids + 1] = fromTail[i]
      end
    end
  else
    ids = redis.call("LRANGE", key, cursor, last)
  end
elseif ascending then
  ids = redis.call("ZRANGE", key, cursor, last)
else
  ids = redis.call("ZREVRANGE", key, cursor, last)
end

local found = {}
for _, id in ipairs(ids) do
  local jobKey = prefix .. id
  local fields = redis.call("HMGET", jobKey, "name", "data")
  if fields[1] and (name == "" or fields[1] == name)
      and (text == "" or (fields[2] and string.find(fields[2], text, 1, true))) then
    found[#found + 1] = { id, redis.call("HGETALL", jobKey) }
  end
end

local nextCursor = -1
if #ids == count then
  nextCursor = cursor + count
end
return { nextCursor, found }
