--[[
  pushParentToWait(parentPrefix, parentId, emitEvent)

  Release used when a child is detached by removal (H19 "detach from parent"):
  unlike the regular release, the parent's delay and priority are ignored and
  it is always appended to `wait`. Only the non-hard detach announces it.
]]
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobInTargetList"

local function pushParentToWait(parentPrefix, parentId, emitEvent)
  local isPausedOrMaxed = isQueuePausedOrMaxed(parentPrefix .. "meta", parentPrefix .. "active")
  addJobInTargetList(parentPrefix .. "wait", parentPrefix .. "marker", "RPUSH", isPausedOrMaxed, parentId)
  if emitEvent then
    redis.call("XADD", parentPrefix .. "events", "*", "event", "waiting", "jobId", parentId,
      "prev", "waiting-children")
  end
end
