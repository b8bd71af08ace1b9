--[[
  removeDeduplicationKey: free a deduplication id, but only for its owner
  (docs/protocol.md §Deduplication), so a job cannot release a key another
  job has claimed since.

  KEYS
    1 deduplication key {P}de:<id>
  ARGV
    1 job id
  Returns
    1 when the key held that job id and was deleted, 0 otherwise.
]]
local owner = redis.call("GET", KEYS[1])
if owner and owner == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
