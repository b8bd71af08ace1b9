--[[
  getCounts: number of jobs per state (docs/protocol.md §Scripts).

  KEYS[1]    {P}
  ARGV[1]    optional: a timestamp (ms); then "delayed" counts only the jobs
             due strictly before it (Node's getDelayedCount(timestamp))
  ARGV[...]  state names: wait, paused, active, or any sorted-set suffix
             (completed, failed, delayed, prioritized, waiting-children, ...),
             from ARGV[2] when a timestamp is given

  Returns an array of integers in argument order.
  A legacy `0:` marker left by BullMQ <= 4 at the tail of wait/paused is not a
  job: it is popped when real jobs share the list, and never counted.
]]
local rcall = redis.call
local prefix = KEYS[1]
local results = {}
-- A state name is never a number, so a numeric first argument is the cutoff.
local delayedBefore = tonumber(ARGV[1])
local first = delayedBefore and 2 or 1

for i = first, #ARGV do
  local state = ARGV[i]
  local key = prefix .. state
  local at = i - first + 1
  if state == "wait" or state == "paused" then
    local tail = rcall("LINDEX", key, -1)
    if tail and string.sub(tail, 1, 2) == "0:" then
      local length = rcall("LLEN", key)
      if length > 1 then
        rcall("RPOP", key)
        results[at] = length - 1
      else
        results[at] = 0
      end
    else
      results[at] = rcall("LLEN", key)
    end
  elseif state == "active" then
    results[at] = rcall("LLEN", key)
  elseif state == "delayed" and delayedBefore then
    -- The first score of the cutoff's millisecond, excluded.
    results[at] = rcall("ZCOUNT", key, "-inf", string.format("(%d", delayedBefore * 0x1000))
  else
    results[at] = rcall("ZCARD", key)
  end
end

return results
