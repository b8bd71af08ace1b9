--[[
  getRanges: job ids of several states within an index range
  (docs/protocol.md §Scripts, Node `queue.getRanges`).

  KEYS[1]    {P}
  ARGV[1]    start index
  ARGV[2]    end index
  ARGV[3]    "1" ascending (oldest first), "0" descending
  ARGV[4..n] state names (wait, paused, active, or a sorted-set suffix)

  Returns one array of ids per state, in argument order. Lists hold the newest
  job at the head, so an ascending read counts from the tail; the client
  reverses those results. A legacy `0:` marker at the tail of wait/paused is
  popped (or the list reported empty when it is the only entry).
]]
local rcall = redis.call
local prefix = KEYS[1]
local rangeStart = tonumber(ARGV[1])
local rangeEnd = tonumber(ARGV[2])
local ascending = ARGV[3] == "1"
local results = {}

local function fromTail(index)
  if index == -1 then
    return 0
  end
  return -(index + 1)
end

local function listRange(key)
  if ascending then
    return rcall("LRANGE", key, fromTail(rangeEnd), fromTail(rangeStart))
  end
  return rcall("LRANGE", key, rangeStart, rangeEnd)
end

for i = 4, #ARGV do
  local state = ARGV[i]
  local key = prefix .. state
  if state == "wait" or state == "paused" then
    local tail = rcall("LINDEX", key, -1)
    if tail and string.sub(tail, 1, 2) == "0:" then
      if rcall("LLEN", key) > 1 then
        rcall("RPOP", key)
        results[#results + 1] = listRange(key)
      else
        results[#results + 1] = {}
      end
    else
      results[#results + 1] = listRange(key)
    end
  elseif state == "active" then
    results[#results + 1] = listRange(key)
  elseif ascending then
    results[#results + 1] = rcall("ZRANGE", key, rangeStart, rangeEnd)
  else
    results[#results + 1] = rcall("ZREVRANGE", key, rangeStart, rangeEnd)
  end
end

return results
