--[[
  addStandardJobs (EchoMQ extension, docs/protocol.md §Extensions): several
  addStandardJob in one call, for add_bulk. Each entry runs addStandardJob's
  own body (includes/addStandardJob), in order: the keyspace, the events and
  each entry's reply are those of the same addStandardJob calls sent one
  after the other. An entry Redis refuses (a command error, e.g. foreign
  data under its key) answers that error, having written what a single call
  writes before such an error; the entries after it go on, as pipelined
  single calls would.

  KEYS (addStandardJob's)
    1 {P}wait          2 {P}paused (unused)   3 {P}meta
    4 {P}id            5 {P}completed         6 {P}delayed
    7 {P}active        8 {P}events            9 {P}marker
  ARGV
    1 the entries: a msgpack array of 1 to 100 arrays of 3 strings, each the
      ARGV of one addStandardJob (AddArgs, data, JobOpts); at most 1 MiB in
      all unless there is a single entry.
  Returns
    an array with one reply per entry, in order: the id (or -5 / -7) as that
    addStandardJob returns it, or {"err", message} for an entry Redis refused.
  Errors (raised before anything is written): a malformed or oversized ARGV.
  Once per call, not per entry: the read of meta (no add writes its fields
  but opts.maxLenEvents when missing, kept in the read) and the marker's
  re-arm (the first add's; member "0" only ever gets score 0 and nothing
  an add does removes it, so the others' would change nothing).
]]
--- @include "includes/addStandardJob"

local entries = cmsgpack.unpack(ARGV[1])
if type(entries) ~= "table" or #entries < 1 or #entries > 100 then
  return redis.error_reply("ERR addStandardJobs: ARGV[1] must pack 1 to 100 entries")
end
if #entries > 1 and #ARGV[1] > 1048576 then
  return redis.error_reply("ERR addStandardJobs: more than 1 MiB of entries")
end
for i = 1, #entries do
  local e = entries[i]
  if type(e) ~= "table" or #e ~= 3 or type(e[1]) ~= "string" or type(e[2]) ~= "string"
    or type(e[3]) ~= "string" then
    return redis.error_reply("ERR addStandardJobs: entry " .. i .. " is not 3 strings")
  end
end

local replies = {}
local g = { meta = nil, marked = false }
for i = 1, #entries do
  local e = entries[i]
  local ok, reply = pcall(addStandardJob, KEYS, e[1], e[2], e[3], g)
  if ok then
    replies[i] = reply
  else
    -- As data, not an error reply: an error inside an array would fail the
    -- whole reply on the client, hiding the entries that were applied.
    replies[i] = { "err", type(reply) == "table" and reply.err or tostring(reply) }
  end
end
return replies
