--[[
  drain: delete every waiting (and optionally delayed) job, sparing the
  current iteration of each job scheduler (docs/protocol.md §Scripts).

  KEYS[1] {P}wait
  KEYS[2] {P}paused
  KEYS[3] {P}delayed
  KEYS[4] {P}prioritized
  KEYS[5] {P}repeat
  ARGV[1] {P}
  ARGV[2] "1" to also drain delayed, else "0"

  Returns nothing. No events; active, finished and waiting-children jobs and
  the marker are untouched. Quirk kept (BullMQ 6.2.0 and 6.7.0): lists are trimmed by
  the number of removed ids from the head, wherever spared ids sit.
]]
local rcall = redis.call

--- @include "includes/removeListJobs"
--- @include "includes/removeZSetJobs"

local prefix = ARGV[1]

-- Removing a scheduler's pending iteration would end the schedule.
local ignoreSet = {}
local schedulers = rcall("ZRANGE", KEYS[5], 0, -1, "WITHSCORES")
for i = 1, #schedulers, 2 do
  ignoreSet["repeat:" .. schedulers[i] .. ":" .. schedulers[i + 1]] = true
end

removeListJobs(KEYS[1], true, prefix, 0, ignoreSet)
removeListJobs(KEYS[2], true, prefix, 0, ignoreSet)
if ARGV[2] == "1" then
  removeZSetJobs(KEYS[3], true, prefix, 0, ignoreSet)
end
removeZSetJobs(KEYS[4], true, prefix, 0, ignoreSet)
