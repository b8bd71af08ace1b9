--[[
  getStateV2: the state a job is in (docs/protocol.md §Scripts), using LPOS (Redis >= 6.0.6).

  KEYS[1] {P}completed
  KEYS[2] {P}failed
  KEYS[3] {P}delayed
  KEYS[4] {P}active
  KEYS[5] {P}wait
  KEYS[6] {P}paused
  KEYS[7] {P}waiting-children
  KEYS[8] {P}prioritized
  ARGV[1] job id

  Returns "completed", "failed", "delayed", "prioritized", "active",
  "waiting" (wait or legacy paused list), "waiting-children" or "unknown".
  Sorted sets are probed before lists because ZSCORE is O(1).
]]
local rcall = redis.call
local jobId = ARGV[1]

if rcall("ZSCORE", KEYS[1], jobId) then
  return "completed"
end
if rcall("ZSCORE", KEYS[2], jobId) then
  return "failed"
end
if rcall("ZSCORE", KEYS[3], jobId) then
  return "delayed"
end
if rcall("ZSCORE", KEYS[8], jobId) then
  return "prioritized"
end
if rcall("LPOS", KEYS[4], jobId) then
  return "active"
end
if rcall("LPOS", KEYS[5], jobId) then
  return "waiting"
end
if rcall("LPOS", KEYS[6], jobId) then
  return "waiting"
end
if rcall("ZSCORE", KEYS[7], jobId) then
  return "waiting-children"
end
return "unknown"
