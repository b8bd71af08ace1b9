--[[
  moveToDeadLetter: fail an active job for good, as moveToFinished does, and in
  the same call move it to the dead-letter queue (EchoMQ extension,
  docs/protocol.md §Dead letters). What a worker with a dead-letter queue sends
  for a final failure instead of moveToFinished.

  KEYS
    1 to 14  moveToFinished's (11 {P}failed, 12 the job, 13 {P}metrics:failed)
    15 {D}failed   16 {D}id   17 {D}events   18 {D}meta
  ARGV
    1 to 9   moveToFinished's (5 must be "failed"; keepJobs in 8 is ignored:
             the job does not stay in {P}failed)
    10 {D}
    11 source queue key "<prefix>:<queue>"
    12 the dead-letter queue's bound (0: none)
  Returns
    what moveToFinished returns. The job is dead-lettered when the failure
    applied (0 or a next-job reply), unless it belongs to a flow.
  Events: moveToFinished's on {P}events; deadLettered on {D}events.
]]
--- @include "includes/finishJob"
--- @include "includes/deadLetter"

if ARGV[5] ~= "failed" then
  return redis.error_reply("moveToDeadLetter fails jobs only")
end
local opts = cmsgpack.unpack(ARGV[8])
opts["keepJobs"] = nil
ARGV[8] = cmsgpack.pack(opts)

local result = finishJob(KEYS, KEYS[11], KEYS[12], KEYS[13], ARGV)
if type(result) == "number" and result < 0 then
  return result
end
deadLetter(KEYS[11], KEYS[12], ARGV[1], ARGV[11], ARGV[10], KEYS[15], KEYS[16], KEYS[17], KEYS[18],
  ARGV[2], ARGV[12])
return result
