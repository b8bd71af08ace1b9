--[[
  H5: delayed score = due * 4096 + sequence. The 4096 slots of a millisecond
  keep FIFO order for jobs due at the same time; once the last slot is taken
  further jobs share it (then ordered by member).
  Returns the score and the absolute due time in ms.
]]
local function getDelayedScore(delayedKey, timestamp, delay)
  local due = tonumber(timestamp)
  local relative = tonumber(delay) or 0
  if relative > 0 then
    due = due + relative
  end
  local base = due * 0x1000
  local last = base + 0xfff
  local highest = redis.call("ZREVRANGEBYSCORE", delayedKey, last, base, "LIMIT", 0, 1, "WITHSCORES")
  if highest[1] then
    local score = tonumber(highest[2])
    if score < last then
      score = score + 1
    end
    return score, due
  end
  return base, due
end
