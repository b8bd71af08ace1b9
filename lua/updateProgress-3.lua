--[[
  updateProgress: store a job's progress and announce it (docs/protocol.md §Scripts).

  KEYS[1] job key
  KEYS[2] {P}events
  KEYS[3] {P}meta
  ARGV[1] job id
  ARGV[2] progress as JSON text (stored and published verbatim)

  Returns 0, or -1 when the job does not exist.
  Event: capped `progress {jobId, data}`.
]]
local rcall = redis.call

--- @include "includes/getOrSetMaxEvents"

if rcall("EXISTS", KEYS[1]) ~= 1 then
  return -1
end

local maxEvents = getOrSetMaxEvents(KEYS[3])
rcall("HSET", KEYS[1], "progress", ARGV[2])
rcall("XADD", KEYS[2], "MAXLEN", "~", maxEvents, "*", "event", "progress",
  "jobId", ARGV[1], "data", ARGV[2])
return 0
