--[[
  H15: fields sent by the worker (failedReason, stacktrace, tm ...) as a
  msgpack array of alternating names and values; "" means nothing to update.
]]
local function updateJobFields(jobKey, msgpackedFields)
  if msgpackedFields and msgpackedFields ~= "" then
    local fields = cmsgpack.unpack(msgpackedFields)
    if type(fields) == "table" and #fields > 0 then
      redis.call("HMSET", jobKey, unpack(fields))
    end
  end
end
