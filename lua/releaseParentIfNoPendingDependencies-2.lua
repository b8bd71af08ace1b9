--[[
  releaseParentIfNoPendingDependencies: the last step of a flow insert, once
  per parent the flow touched, in the same transaction as the adds. During
  the insert a child that already existed and had completed only recorded its
  result (handleDuplicatedJob, deferred): the parent's other children were not
  stored yet. Now they are, so a parent left without pending dependencies
  leaves waiting-children. A no-op for a parent that is gone or not parked.

  KEYS
    1 parent job key     2 the parent's :dependencies
  ARGV
    1 the parent's queue key ({P} without the trailing ':')
    2 parent id
    3 now (ms): the base of the parent's delay
  Returns nothing.
  Events: those of the release (waiting or delayed, on the parent's queue).
  A parent marked `flowAttachmentFailed` (a child of the flow belonged to
  another parent, -7) only loses the mark: the insert refused that child, so
  nothing of the flow may release its parent.
]]
--- @include "includes/moveParentToWait"

if redis.call("HGET", KEYS[1], "flowAttachmentFailed") then
  redis.call("HDEL", KEYS[1], "flowAttachmentFailed")
  return
end

moveParentToWaitIfNoPendingDependencies(ARGV[1] .. ":", KEYS[1], ARGV[2], ARGV[3])
