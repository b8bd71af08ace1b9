--[[
  getTimestamp(jobKey, fieldList) -> decimal string or nil

  H22: the first present field of fieldList, e.g. {"finishedOn",
  "processedOn", "timestamp"}. The raw stored string is returned, not a
  number: clean compares it as a string with its string cutoff, reproducing
  BullMQ's lexicographic comparison (numeric only for equal-length values).
]]
local function getTimestamp(jobKey, fieldList)
  local values = redis.call("HMGET", jobKey, unpack(fieldList))
  for i = 1, #fieldList do
    if values[i] then
      return values[i]
    end
  end
  return nil
end
