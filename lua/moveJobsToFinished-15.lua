--[[
  moveJobsToFinished (EchoMQ extension, docs/protocol.md §Extensions): several
  moveToFinished in one call — group commit. Each entry is exactly one
  moveToFinished's ARGV and runs the same body (includes/finishJob), in order,
  fetch-next included: the keyspace, the events and each entry's reply are
  those of the same moveToFinished calls sent one after the other.

  KEYS
    1 {P}wait     2 {P}active    3 {P}prioritized  4 {P}events
    5 {P}stalled  6 {P}limiter   7 {P}delayed      8 {P}paused (unused)
    9 {P}meta     10 {P}pc
    11 {P}completed   12 {P}failed   13 {P}metrics:completed
    14 {P}marker (moveToFinished's position)   15 {P}metrics:failed
  Each entry's job key is {P}<id> (ARGV 7 and 1 of the entry), the key
  moveToFinished gets as KEYS[12]; the queue's keys share its hash slot.
  ARGV
    1 the entries: a msgpack array of 1 to 32 arrays of 9 strings, each the
      ARGV of one moveToFinished (id, now, field, value, target, fetch next,
      {P}, FinishOpts, FieldsToUpdate); at most 1 MiB in all unless there is
      a single entry.
  Returns
    an array with one reply per entry, in order: what that moveToFinished
    returns (0, a next-job reply, or -1 -2 -3 -4 -6 -9). A refused entry
    changes nothing; the others go on.
  Errors (raised before anything is written): a malformed or oversized ARGV.
]]
--- @include "includes/finishJob"

local entries = cmsgpack.unpack(ARGV[1])
if type(entries) ~= "table" or #entries < 1 or #entries > 32 then
  return redis.error_reply("ERR moveJobsToFinished: ARGV[1] must pack 1 to 32 entries")
end
if #entries > 1 and #ARGV[1] > 1048576 then
  return redis.error_reply("ERR moveJobsToFinished: more than 1 MiB of entries")
end
for i = 1, #entries do
  local a = entries[i]
  if type(a) ~= "table" or #a ~= 9 then
    return redis.error_reply("ERR moveJobsToFinished: entry " .. i .. " is not 9 strings")
  end
  for j = 1, 9 do
    if type(a[j]) ~= "string" then
      return redis.error_reply("ERR moveJobsToFinished: entry " .. i .. " is not 9 strings")
    end
  end
  if a[5] ~= "completed" and a[5] ~= "failed" then
    return redis.error_reply("ERR moveJobsToFinished: entry " .. i .. " has no target")
  end
end

local replies = {}
for i = 1, #entries do
  local a = entries[i]
  if a[5] == "completed" then
    replies[i] = finishJob(KEYS, KEYS[11], a[7] .. a[1], KEYS[13], a)
  else
    replies[i] = finishJob(KEYS, KEYS[12], a[7] .. a[1], KEYS[15], a)
  end
end
return replies
