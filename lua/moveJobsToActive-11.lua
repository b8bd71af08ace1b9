--[[
  moveJobsToActive (EchoMQ extension, docs/protocol.md §Extensions): a
  worker with several free slots takes several jobs in one call. Each take
  runs moveToActive's own body (includes/fetchNextJob), in order, each with
  its own token, lock and `active` event: the keyspace and the replies are
  those of the same moveToActive calls sent one after the other, up to and
  including the first that takes no job (rate limited, paused or maxed,
  nothing ready); the calls after it are not made.

  KEYS (moveToActive's)
    1 {P}wait     2 {P}active    3 {P}prioritized  4 {P}events
    5 {P}stalled (unused)        6 {P}limiter      7 {P}delayed
    8 {P}paused (unused)         9 {P}meta         10 {P}pc
    11 {P}marker
  ARGV
    1 {P}
    2 now (ms): processedOn and promotion cut-off
    3 FetchOpts without its token (msgpack map: lockDuration, limiter, name)
    4 the tokens: a msgpack array of 1 to 32 strings, one per take
  Returns
    an array of 1 to #tokens moveToActive replies, in order; every one but
    the last is a job [flat HGETALL, id, 0, 0] locked with its token; the
    last is a job or what moveToActive answers without one.
  Errors (raised before anything is written): a malformed ARGV.
  Once per call (includes/groupWrites): the marker's re-arm (the first
  take's; the others' would change nothing), the read of meta, and the read
  of delayed once a take found nothing more due.
]]
--- @include "includes/fetchNextJob"
--- @include "includes/groupWrites"

local opts = cmsgpack.unpack(ARGV[3])
local tokens = cmsgpack.unpack(ARGV[4])
if type(opts) ~= "table" then
  return redis.error_reply("ERR moveJobsToActive: ARGV[3] must pack a map")
end
if type(tokens) ~= "table" or #tokens < 1 or #tokens > 32 then
  return redis.error_reply("ERR moveJobsToActive: ARGV[4] must pack 1 to 32 tokens")
end
for i = 1, #tokens do
  if type(tokens[i]) ~= "string" then
    return redis.error_reply("ERR moveJobsToActive: token " .. i .. " is not a string")
  end
end

local replies = {}
local g = newGroupWrites()
for i = 1, #tokens do
  -- One options table for every take; each reads its own token, set here.
  opts["token"] = tokens[i]
  local reply = fetchNextJob(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[9], KEYS[10],
    KEYS[11], ARGV[1], ARGV[2], opts, true, nil, g)
  replies[i] = reply
  if type(reply[1]) ~= "table" then
    break
  end
end
return replies
