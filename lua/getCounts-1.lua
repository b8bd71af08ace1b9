--[[
  getCounts: number of jobs per state (docs/protocol.md §Scripts).

  KEYS[1]    {P}
  ARGV[1..n] state names: wait, paused, active, or any sorted-set suffix
             (completed, failed, delayed, prioritized, waiting-children, ...)

  Returns an array of integers in argument order.
  A legacy `0:` marker left by BullMQ <= 4 at the tail of wait/paused is not a
  job: it is popped when real jobs share the list, and never counted.
]]
local rcall = redis.call
local prefix = KEYS[1]
local results = {}

for i = 1, #ARGV do
  local state = ARGV[i]
  local key = prefix .. state
  if state == "wait" or state == "paused" then
    local tail = rcall("LINDEX", key, -1)
    if tail and string.sub(tail, 1, 2) == "0:" then
      local length = rcall("LLEN", key)
      if length > 1 then
        rcall("RPOP", key)
        results[i] = length - 1
      else
        results[i] = 0
      end
    else
      results[i] = rcall("LLEN", key)
    end
  elseif state == "active" then
    results[i] = rcall("LLEN", key)
  else
    results[i] = rcall("ZCARD", key)
  end
end

return results
