--[[
  updateData: replace a job's data (docs/protocol.md §Scripts).

  KEYS[1] job key
  ARGV[1] new data as JSON text (stored verbatim)

  Returns 0, or -1 when the job does not exist. No event.
]]
local rcall = redis.call

if rcall("EXISTS", KEYS[1]) ~= 1 then
  return -1
end

rcall("HSET", KEYS[1], "data", ARGV[1])
return 0
