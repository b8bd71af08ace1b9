--[[
  removeChildDependency: detach a child from its parent. A pending child
  stops being waited for (the parent moves on if it was the last one); the
  child keeps running on its own (docs/flows.md §Detaching).

  KEYS
    1 {P} of the child's queue
  ARGV
    1 full key of the child   2 full key of the parent
  Returns
    0 detached | 1 not a pending dependency of that parent
    -1 missing child | -5 missing parent
  Events: waiting (on the parent's queue) when the parent is released.
]]
--- @include "includes/removeParentDependencyKey"

local childKey = ARGV[1]
local parentKey = ARGV[2]
if redis.call("EXISTS", childKey) ~= 1 then
  return -1
end
if redis.call("EXISTS", parentKey) ~= 1 then
  return -5
end
if not removeParentDependencyKey(childKey, false, parentKey, KEYS[1]) then
  return 1
end
redis.call("HDEL", childKey, "parentKey", "parent")
return 0
