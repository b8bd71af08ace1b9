--[[
  addLog: append one line to a job's log (docs/protocol.md §Scripts).

  KEYS[1] job key
  KEYS[2] logs key {P}<id>:logs
  ARGV[1] job id
  ARGV[2] log line
  ARGV[3] keepLogs (integer) or "" for unbounded

  Returns the number of lines kept (min(keepLogs, length) when bounded), or -1
  when the job does not exist. No event.
]]
local rcall = redis.call

if rcall("EXISTS", KEYS[1]) ~= 1 then
  return -1
end

local count = rcall("RPUSH", KEYS[2], ARGV[2])
if ARGV[3] ~= "" then
  local keepLogs = tonumber(ARGV[3])
  rcall("LTRIM", KEYS[2], -keepLogs, -1)
  return math.min(keepLogs, count)
end
return count
