--[[
  extendLocks: renew a batch of job locks in one call (docs/protocol.md §Scripts, §Lock renewal).

  KEYS
    1 {P}stalled
  ARGV
    1 {P}
    2 tokens (msgpack array of strings)
    3 job ids (msgpack array, same length and order as the tokens)
    4 lock duration (ms)
  Returns
    the ids whose lock is missing or held by another token (empty = all
    renewed). No events.
]]
local tokens = cmsgpack.unpack(ARGV[2])
local jobIds = cmsgpack.unpack(ARGV[3])
local failed = {}

for i, jobId in ipairs(jobIds) do
  local lockKey = ARGV[1] .. jobId .. ":lock"
  local token = tokens[i]
  if token ~= nil and redis.call("GET", lockKey) == token then
    redis.call("SET", lockKey, token, "PX", ARGV[4])
    redis.call("SREM", KEYS[1], jobId)
  else
    table.insert(failed, jobId)
  end
end

return failed
