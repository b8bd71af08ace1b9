--[[
  moveJobsToFinished (EchoMQ extension, docs/protocol.md §Extensions): several
  moveToFinished in one call — group commit. Each entry runs the same body as
  one moveToFinished (includes/finishJob), in order, fetch-next included: the
  keyspace, the events and each entry's reply are those of the same
  moveToFinished calls sent one after the other. What the entries share (the
  prefix, the FinishOpts but for the lock token) is sent and unpacked once
  per call, not once per entry.

  KEYS
    1 {P}wait     2 {P}active    3 {P}prioritized  4 {P}events
    5 {P}stalled  6 {P}limiter   7 {P}delayed      8 {P}paused (unused)
    9 {P}meta     10 {P}pc
    11 {P}completed   12 {P}failed   13 {P}metrics:completed
    14 {P}marker (moveToFinished's position)   15 {P}metrics:failed
  Each entry's job key is {P}<id> (ARGV 1 and the entry's id), the key
  moveToFinished gets as KEYS[12]; the queue's keys share its hash slot.
  ARGV
    1 {P}
    2 the shared options: a msgpack array of 1 to 32 strings, each a
      moveToFinished FinishOpts map without its token
    3 the entries: a msgpack array of 1 to 32 arrays of 8 strings: id, now,
      value, target (completed | failed), fetch next (1 | 0), the index in
      ARGV 2 of its options (from 1), its lock token, FieldsToUpdate or "";
      ARGV 2 and 3 at most 1 MiB in all unless there is a single entry.
  Entry i runs as moveToFinished with ARGV id, now, returnvalue | failedReason
  (by target), value, target, fetch next, {P}, its options with its token,
  FieldsToUpdate.
  Returns
    an array with one reply per entry, in order: what that moveToFinished
    returns (0, a next-job reply, or -1 -2 -3 -4 -6 -9). A refused entry
    changes nothing; the others go on.
  Errors (raised before anything is written): a malformed or oversized ARGV.
  DAG flows (docs/flows.md §DAGs): after an entry finished, a node with
  extra parents (`{P}<id>:dag:parents`) is handed to up to 100 of them, as
  releaseDagParents-5 does; for every other job that is one EXISTS.
  Once per call (includes/groupWrites): the plain entries' SREM of stalled
  and ZADD of completed or failed are made at the end of the call (or
  before an entry of a flow, with a deduplication id or with retention, and
  before a DAG hand-over); the marker is re-armed by the first take only;
  meta is read once; one read of delayed up to the latest entry's time
  stands for each fetch-next's while it finds nothing due; one EXISTS of all
  the entries' children sets and DAG parents stands for each entry's own
  while none exists. Should a command fail midway, what the entries before
  it deferred is still written before the error is raised, as their own
  calls would have.
]]
--- @include "includes/finishJob"
--- @include "includes/groupWrites"

local function malformed(what)
  return redis.error_reply("ERR moveJobsToFinished: " .. what)
end

local shared = cmsgpack.unpack(ARGV[2])
local entries = cmsgpack.unpack(ARGV[3])
if type(shared) ~= "table" or #shared < 1 or #shared > 32 then
  return malformed("ARGV[2] must pack 1 to 32 options")
end
if type(entries) ~= "table" or #entries < 1 or #entries > 32 then
  return malformed("ARGV[3] must pack 1 to 32 entries")
end
if #entries > 1 and #ARGV[2] + #ARGV[3] > 1048576 then
  return malformed("more than 1 MiB of entries")
end
-- The lock's PX text of each options, made once, not per take (as each take
-- would make it from the number); kept beside the options, not in them, so
-- nothing a client packs can stand for it.
local lockPx = {}
for i = 1, #shared do
  if type(shared[i]) ~= "string" then
    return malformed("options " .. i .. " is not a string")
  end
  local ok, opts = pcall(cmsgpack.unpack, shared[i])
  if not ok or type(opts) ~= "table" then
    return malformed("options " .. i .. " is not a msgpack map")
  end
  shared[i] = opts
  if type(opts["lockDuration"]) == "number" then
    lockPx[opts] = string.format("%d", opts["lockDuration"])
  end
end
-- `"" <= v` holds for every string and raises for any other value, with no
-- function call, where type() interns its answer on every call: all entries
-- are checked in one protected pass, and only a failed pass pays for the
-- checks that name the entry.
local function entriesAreStrings()
  for i = 1, #entries do
    local e = entries[i]
    if #e ~= 8 then
      error("not 8")
    end
    local _ = "" <= e[1] and "" <= e[2] and "" <= e[3] and "" <= e[4]
      and "" <= e[5] and "" <= e[6] and "" <= e[7] and "" <= e[8]
  end
end
local allStrings = pcall(entriesAreStrings)
for i = 1, #entries do
  local e = entries[i]
  if not allStrings then
    if type(e) ~= "table" or #e ~= 8 then
      return malformed("entry " .. i .. " is not 8 strings")
    end
    for j = 1, 8 do
      if type(e[j]) ~= "string" then
        return malformed("entry " .. i .. " is not 8 strings")
      end
    end
  end
  if e[4] ~= "completed" and e[4] ~= "failed" then
    return malformed("entry " .. i .. " has no target")
  end
  local o = tonumber(e[6])
  if o == nil or shared[o] == nil then
    return malformed("entry " .. i .. " names no options")
  end
  e[6] = o
end

local prefix = ARGV[1]
local replies = {}
local g = newGroupWrites()
g.lockPx = lockPx

-- One read of delayed up to the latest time a fetch-next runs at stands for
-- each of theirs while nothing due is found (no plain entry adds a delayed job).
local fetches, latest = 0, nil
local lastText, t = nil, nil
for i = 1, #entries do
  if entries[i][5] == "1" then
    -- Entries stamped in the same ms share a text: converted once.
    if entries[i][2] ~= lastText then
      lastText = entries[i][2]
      t = tonumber(lastText)
    end
    if t == nil then
      latest = nil
      fetches = 0
      break
    end
    fetches = fetches + 1
    if latest == nil or t > latest then
      latest = t
    end
  end
end
if fetches > 1 then
  local maxScore = string.format("%d", (latest + 1) * 0x1000 - 1)
  if #redis.call("ZRANGEBYSCORE", KEYS[7], "0", maxScore, "LIMIT", "0", "1") == 0 then
    g.dueUntil = latest
    -- latest is the last of the times the fetch-nexts run at.
    g.noneDue = true
  end
end

-- One EXISTS of every entry's children sets and DAG parents stands for the
-- entries' own while none exists: only flows and DAG hand-overs (which flush)
-- make them.
if #entries > 1 then
  local probe = {}
  for i = 1, #entries do
    local jobKey = prefix .. entries[i][1]
    probe[3 * i - 2] = jobKey .. ":dependencies"
    probe[3 * i - 1] = jobKey .. ":unsuccessful"
    probe[3 * i] = jobKey .. ":dag:parents"
  end
  if redis.call("EXISTS", unpack(probe)) == 0 then
    g.noChildren = true
  end
end

local function finishAll()
  -- One argument table for every entry, refilled: finishJob keeps none of it.
  local a = { "", "", "", "", "", "", prefix, "", "" }
  for i = 1, #entries do
    local e = entries[i]
    local opts = shared[e[6]]
    -- The options are the same table for the entries that share them; each
    -- finish reads its own token, set just before it runs.
    opts["token"] = e[7]
    a[1], a[2], a[4], a[5], a[6], a[9] = e[1], e[2], e[3], e[4], e[5], e[8]
    if e[4] == "completed" then
      a[3] = "returnvalue"
      replies[i] = finishJob(KEYS, KEYS[11], prefix .. e[1], KEYS[13], a, opts, g)
    else
      a[3] = "failedReason"
      replies[i] = finishJob(KEYS, KEYS[12], prefix .. e[1], KEYS[15], a, opts, g)
    end
    -- A DAG node with extra parents is handed to them in this same call (at
    -- most 100 here; a node with more is finished by the DagReleaser).
    local r = replies[i]
    if not g.noChildren and (r == 0 or type(r) == "table") then
      local parentsKey = prefix .. e[1] .. ":dag:parents"
      if redis.call("EXISTS", parentsKey) == 1 then
        flushGroupWrites(g, KEYS[5])
        rare = rare or rareHelpers()
        rare.releaseDagParents(prefix .. e[1], parentsKey, prefix .. "dag:pending", KEYS[11], KEYS[12], e[1], e[2], 100)
      end
    end
  end
end

local ok, err = pcall(finishAll)
flushGroupWrites(g, KEYS[5])
if not ok then
  error(err)
end
return replies
