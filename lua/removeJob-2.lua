--[[
  removeJob: remove one job, and by default its children (docs/protocol.md §Scripts).

  KEYS[1] job key
  KEYS[2] {P}repeat
  ARGV[1] job id
  ARGV[2] "1" to remove the children too, "0" otherwise
  ARGV[3] {P}

  Returns 1 removed, 0 nothing removed because the job (or, with children, a
  descendant) is locked by a worker, -8 the job is the current iteration of a
  job scheduler.
  Events: capped `removed {jobId, prev}` per deleted job (children on their
  own queue's stream); uncapped `waiting {jobId, prev: waiting-children}` for
  a parent released by the removal.
]]
local rcall = redis.call

--- @include "includes/isJobSchedulerJob"
--- @include "includes/removeJobWithChildren"

local jobId = ARGV[1]
local prefix = ARGV[3]
local removeChildren = ARGV[2] == "1"

if isJobSchedulerJob(jobId, KEYS[1], KEYS[2]) then
  return -8
end

if isLocked(prefix, jobId, removeChildren) then
  return 0
end

removeJobWithChildren(prefix, jobId, nil, {
  removeChildren = removeChildren,
  ignoreProcessed = false,
  ignoreLocked = false,
})
return 1
