--[[
  getJobs: the jobs (id and hash) of each given state in one atomic read
  (docs/protocol.md §Reading jobs). An id whose hash is gone (removed since,
  or a legacy marker) is skipped; for a bounded range the page is refilled
  from the ids after it, up to a number of extra reads, so the page keeps its
  size where the state has enough jobs.

  KEYS
    1 {P} (the queue's key prefix)
  ARGV
    1 start   2 end (inclusive; negative counts from the end)
    3 "1" ascending (oldest first) | "0" newest first
    4 most reads per state for a bounded range
    5.. state key suffixes (wait, paused, active, delayed, prioritized,
        completed, failed, waiting-children)
  Returns
    one array per state, in argument order, of {id, {field, value, ...}}.
  Side effect (as BullMQ): a legacy "0:..." marker at the tail of wait or
  paused is popped when other ids remain behind it.
]]
local prefix = KEYS[1]
local first = tonumber(ARGV[1])
local last = tonumber(ARGV[2])
local ascending = ARGV[3] == "1"
local maxReads = tonumber(ARGV[4])

local function isList(state)
  return state == "wait" or state == "paused" or state == "active"
end

-- Ids [from, to] of a state in the asked order. Lists hold the newest at the
-- head, so an ascending page is read from the tail with negative indexes.
local function idsOf(key, state, from, to, length)
  if not isList(state) then
    if ascending then
      return redis.call("ZRANGE", key, from, to)
    end
    return redis.call("ZREVRANGE", key, from, to)
  end
  if not ascending then
    return redis.call("LRANGE", key, from, to)
  end
  -- Past the end Redis would clamp both indexes to the head: nothing there.
  if length ~= nil and from >= 0 and to >= 0 and from >= length then
    return {}
  end
  local tailFrom = (to == -1) and 0 or -(to + 1)
  local tailTo = (from == -1) and 0 or -(from + 1)
  local ids = redis.call("LRANGE", key, tailFrom, tailTo)
  local oldestFirst = {}
  for i = #ids, 1, -1 do
    oldestFirst[#oldestFirst + 1] = ids[i]
  end
  return oldestFirst
end

-- Returns the list's length after the cleanup, or nil when not a ready list
-- or no marker was found.
local function dropLegacyMarker(key, state)
  if state ~= "wait" and state ~= "paused" then
    return nil
  end
  local tail = redis.call("LINDEX", key, -1)
  if not tail or string.sub(tail, 1, 2) ~= "0:" then
    return nil
  end
  local length = redis.call("LLEN", key)
  if length > 1 then
    redis.call("RPOP", key)
    return length - 1
  end
  return 0
end

local function addIfPresent(out, id)
  local hash = redis.call("HGETALL", prefix .. id)
  if #hash > 0 then
    out[#out + 1] = { id, hash }
  end
end

local function jobsOf(state)
  local key = prefix .. state
  local out = {}
  local cleaned = dropLegacyMarker(key, state)
  local length
  if ascending and isList(state) and first >= 0 and last >= 0 then
    length = cleaned or redis.call("LLEN", key)
  end
  if first < 0 or last < 0 then
    for _, id in ipairs(idsOf(key, state, first, last, length)) do
      addIfPresent(out, id)
    end
    return out
  end
  local pageSize = last - first + 1
  local cursor = first
  local reads = 0
  while #out < pageSize and reads < maxReads do
    local ids = idsOf(key, state, cursor, cursor + pageSize - 1, length)
    if #ids == 0 then
      break
    end
    for _, id in ipairs(ids) do
      if #out >= pageSize then
        break
      end
      addIfPresent(out, id)
    end
    cursor = cursor + #ids
    reads = reads + 1
  end
  return out
end

local result = {}
for i = 5, #ARGV do
  result[#result + 1] = jobsOf(ARGV[i])
end
return result
