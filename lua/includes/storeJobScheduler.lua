--[[
  H21 store scheduler: index the scheduler at its current iteration and
  rewrite its definition hash (docs/protocol.md §Job scheduler hash).
  storeJobScheduler(schedulerId, schedulerKey, repeatKey, nextMillis, opts,
                    templateData, templateOpts)
    opts          decoded scheduler options (name, tz, limit, pattern,
                  startDate, endDate, every, offset)
    templateData  JSON text of the template data
    templateOpts  decoded template job options
  The hash is deleted and written anew so that options dropped by an upsert
  disappear; `ic` and a previously computed `offset` survive the rewrite.
]]
local function storeJobScheduler(schedulerId, schedulerKey, repeatKey, nextMillis, opts, templateData,
                                 templateOpts)
  redis.call("ZADD", repeatKey, nextMillis, schedulerId)

  local fields = {}
  local function put(field, value)
    table.insert(fields, field)
    table.insert(fields, value)
  end

  for _, field in ipairs({"tz", "limit", "pattern", "startDate", "endDate", "every"}) do
    if opts[field] ~= nil then
      put(field, opts[field])
    end
  end

  -- A 0 offset is a value (Lua treats 0 as true), so only nil falls back.
  if opts["offset"] ~= nil then
    put("offset", opts["offset"])
  else
    local storedOffset = redis.call("HGET", schedulerKey, "offset")
    if storedOffset then
      put("offset", tonumber(storedOffset))
    end
  end

  local jsonOpts = cjson.encode(templateOpts)
  if jsonOpts ~= "{}" then
    put("opts", jsonOpts)
  end
  if templateData ~= nil and templateData ~= "{}" then
    put("data", templateData)
  end
  put("ic", redis.call("HGET", schedulerKey, "ic") or 1)

  redis.call("DEL", schedulerKey)
  redis.call("HMSET", schedulerKey, "name", opts["name"], unpack(fields))
end
