--[[
  getStateBounded: EchoMQ extension, read-only (docs/scale.md §Getters). The
  state of one job as getStateV2 answers it, without walking a long list:
  getStateV2's LPOS reads the whole of `wait` for a job near its tail, which
  on a queue of millions is one call of that size.

  Sorted sets are probed with ZSCORE. A lock means active (only a move to
  active creates one). Lists are searched from both ends, at most ARGV[2]
  entries from each; a list no longer than twice that is thus searched
  whole. Past that, a job found in no structure whose hash exists and has
  not finished is in the middle of a long list: `active` if the active list
  is the long one and `wait` is not, else "waiting". The one answer that can
  differ from getStateV2's: a job hash in no structure at all (an orphan,
  audit A4) reads "waiting" instead of "unknown" while a list is that long.

  KEYS[1] {P}completed  KEYS[2] {P}failed  KEYS[3] {P}delayed
  KEYS[4] {P}active     KEYS[5] {P}wait    KEYS[6] {P}paused
  KEYS[7] {P}waiting-children  KEYS[8] {P}prioritized
  ARGV[1] job id
  ARGV[2] entries searched from each end of a list
  ARGV[3] {P}

  Returns the state name, as getStateV2.
]]
local rcall = redis.call
local jobId = ARGV[1]
local reach = ARGV[2]
local prefix = ARGV[3]

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
if rcall("ZSCORE", KEYS[7], jobId) then
  return "waiting-children"
end

-- true when found, false when surely absent, nil when the list is too long
-- to tell.
local function inList(key)
  if rcall("LPOS", key, jobId, "MAXLEN", reach) then
    return true
  end
  if rcall("LLEN", key) <= 2 * tonumber(reach) then
    return false
  end
  if rcall("LPOS", key, jobId, "RANK", "-1", "MAXLEN", reach) then
    return true
  end
  return nil
end

local jobKey = prefix .. jobId
local active = false
if rcall("EXISTS", jobKey .. ":lock") == 1 then
  active = true
else
  active = inList(KEYS[4])
end
if active then
  return "active"
end
local waiting = inList(KEYS[5])
if waiting then
  return "waiting"
end
local paused = inList(KEYS[6])
if paused then
  return "waiting"
end
if active == false and waiting == false and paused == false then
  return "unknown"
end
-- Somewhere in the middle of a long list, if anywhere.
if rcall("EXISTS", jobKey) == 0 or rcall("HEXISTS", jobKey, "finishedOn") == 1 then
  return "unknown"
end
if active == nil and waiting == false and paused == false then
  return "active"
end
return "waiting"
