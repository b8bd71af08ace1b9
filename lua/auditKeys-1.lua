--[[
  auditKeys: EchoMQ extension, read-only (docs/stalled-checker.md §Audit). One
  SCAN step over the queue's keys, for what only the keys show: locks (every
  `{P}<id>:lock`) and job hashes that no state may hold (orphans). Each is
  read in this call's atomic view: a lock's token and PTTL, and for both the
  sorted-set states that hold the job and whether its hash exists. One call
  looks at one SCAN step of `count` buckets, whatever the queue holds.

  KEYS[1] the queue prefix {P}
  ARGV[1] SCAN cursor ("0" to begin)
  ARGV[2] SCAN COUNT
  ARGV[3] the prefix as a glob, special characters escaped
  Returns {next cursor, locks, hashes}: a lock is {id, token, PTTL, hash
    exists (1/0), sorted-set states holding the job, comma-separated}; a
    hash is {id, sorted-set states holding it}.
]]
local p = KEYS[1]
local plen = string.len(p)
local reply = redis.call("SCAN", ARGV[1], "MATCH", ARGV[3] .. "*", "COUNT", ARGV[2])
local sets = {"prioritized", "delayed", "waiting-children", "completed", "failed"}
local function holders(id)
  local found = {}
  for _, s in ipairs(sets) do
    if redis.call("ZSCORE", p .. s, id) then
      found[#found + 1] = s
    end
  end
  return table.concat(found, ",")
end
local locks, hashes = {}, {}
for _, k in ipairs(reply[2]) do
  local suffix = string.sub(k, plen + 1)
  if string.sub(suffix, -5) == ":lock" then
    local id = string.sub(suffix, 1, -6)
    locks[#locks + 1] = {id, redis.call("GET", k) or "", redis.call("PTTL", k),
      redis.call("EXISTS", p .. id), holders(id)}
  elseif redis.call("TYPE", k)["ok"] == "hash" and redis.call("HEXISTS", k, "timestamp") == 1 then
    hashes[#hashes + 1] = {suffix, holders(suffix)}
  end
end
return {reply[1], locks, hashes}
