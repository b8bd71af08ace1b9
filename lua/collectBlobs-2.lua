--[[
  collectBlobs (EchoMQ extension, payload offload, docs/operations.md
  §Memory): one page of the offloaded payloads last found in use before a
  cutoff. A blob is still in use when the job that owns it exists and its
  `data` or `returnvalue` names the blob's key; such a blob is stamped with
  `now` (looked at again a grace later). Every other one is answered, for
  the caller to delete from the store and then forget (ZREM, HDEL): its job
  was removed (by retention, by any client), replaced, or never added (a
  producer that died between writing the blob and adding the job).

  KEYS
    1 {P}blobs        ZSET blob key -> ms it was written or last found in use
    2 {P}blobs:owner  HASH blob key -> the id of the job that holds it
  ARGV
    1 {P} (the queue's key prefix, for the owners' job hashes)
    2 cutoff (ms): blobs stamped at or before it are looked at
    3 now (ms)     4 most blobs per call (1 to 1000)
  Returns
    { how many blobs were read (at most ARGV[4], so the call is bounded
    whatever the queue holds), then the keys of those no job uses }
]]
local limit = tonumber(ARGV[4])
if limit == nil or limit < 1 or limit > 1000 then
  return redis.error_reply("ERR collectBlobs: the page must be 1 to 1000")
end
local due = redis.call("ZRANGE", KEYS[1], "-inf", ARGV[2], "BYSCORE", "LIMIT", 0, limit)
local unused = {#due}
for _, key in ipairs(due) do
  local owner = redis.call("HGET", KEYS[2], key)
  local used = false
  if owner then
    local fields = redis.call("HMGET", ARGV[1] .. owner, "data", "returnvalue")
    for _, text in ipairs(fields) do
      if text and string.find(text, key, 1, true) then
        used = true
      end
    end
  end
  if used then
    redis.call("ZADD", KEYS[1], ARGV[3], key)
  else
    unused[#unused + 1] = key
  end
end
return unused
