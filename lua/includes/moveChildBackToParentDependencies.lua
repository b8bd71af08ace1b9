--[[
  A finished child that runs again is pending for its parent again: its
  recorded outcome (`:processed`, or `:failed` / `:unsuccessful`) becomes a
  pending dependency. A parent that already left waiting-children is not
  moved back; its own finish then waits for the child (-4).
  moveChildBackToParentDependencies(jobKey, prevState)
    prevState  "failed" or "completed": the set the child comes from
]]
local function moveChildBackToParentDependencies(jobKey, prevState)
  local parentKey = redis.call("HGET", jobKey, "parentKey")
  if not parentKey or redis.call("EXISTS", parentKey) ~= 1 then
    return
  end
  local recorded
  if prevState == "failed" then
    recorded = redis.call("ZREM", parentKey .. ":unsuccessful", jobKey) == 1
      or redis.call("HDEL", parentKey .. ":failed", jobKey) == 1
  else
    recorded = redis.call("HDEL", parentKey .. ":processed", jobKey) == 1
  end
  if recorded then
    redis.call("SADD", parentKey .. ":dependencies", jobKey)
  end
end
