--[[
  The writes a group call (moveJobsToFinished, moveJobsToActive) makes once
  for all its entries instead of once per entry (docs/protocol.md
  §Extensions). Those deferred to the end are idempotent or commute with
  everything a plain entry does after them, so making them at the end
  leaves the keyspace the same calls one after the other leave:
    srem     ids whose lock was released: one SREM of {P}stalled
    zkeys    {P}completed / {P}failed, in first-use order, and for each of
    zsets    them the score/id pairs of the jobs kept there: one ZADD each
  one write a group makes once, at its first take, not deferred:
    marked   the marker member "0" was re-armed at score 0 (the only value
             that member is ever given, and nothing a group does removes
             it), so the other takes' re-arms would change nothing
  and reads a group makes once:
    meta     the queue's meta fields (paused, concurrency, max, duration,
             opts.maxLenEvents), which no plain entry writes
    maxEvents, trimLen
             opts.maxLenEvents as a number, and the MAXLEN of a finish's
             event, from meta once
    noneDue  the one read of delayed covers every fetch-next of the call
    dueUntil no delayed job is due at or before this ms (nothing a plain
             entry does adds a delayed job)
    noChildren none of the group's jobs has a children set or DAG parents
             (only flows and DAG hand-overs make them)
  and, set by moveJobsToFinished and kept for the whole call (the flush
  leaves it, since it depends on the call's options only):
    lockPx   each options table's lockDuration as the text of the lock's PX
  A path that reads or writes those keys otherwise (flows, deduplication,
  retention, DAG parents) first flushes: the writes are made and the reads
  forgotten. The shared bodies (finishJob and what it includes) reach the
  two functions through the table, so the single-job scripts that share
  those bodies do not create them.
    g.zadd(g, key, score, member)      a ZADD deferred
    g.flush(g, stalledKey)             the deferred writes made now
]]
local function deferZadd(g, key, score, member)
  local set = g.zsets[key]
  if not set then
    set = {}
    g.zsets[key] = set
    g.zkeys[#g.zkeys + 1] = key
  end
  set[#set + 1] = score
  set[#set + 1] = member
end

local function flushGroupWrites(g, stalledKey)
  if #g.srem > 0 then
    redis.call("SREM", stalledKey, unpack(g.srem))
    g.srem = {}
  end
  if #g.zkeys > 0 then
    for i = 1, #g.zkeys do
      local key = g.zkeys[i]
      redis.call("ZADD", key, unpack(g.zsets[key]))
    end
    g.zkeys, g.zsets = {}, {}
  end
  g.meta = nil
  g.maxEvents = nil
  g.trimLen = nil
  g.dueUntil = nil
  g.noneDue = nil
  g.noChildren = nil
end

local function newGroupWrites()
  return {
    srem = {}, zkeys = {}, zsets = {}, marked = false, meta = nil, dueUntil = nil,
    zadd = deferZadd, flush = flushGroupWrites,
  }
end
