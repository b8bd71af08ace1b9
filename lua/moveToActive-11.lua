--[[
  moveToActive: a worker takes the next job (docs/protocol.md §Scripts). Due delayed
  jobs are promoted first; then the tail of wait, else the lowest
  prioritized job, is moved to the head of active and locked.

  KEYS
    1 {P}wait     2 {P}active    3 {P}prioritized  4 {P}events
    5 {P}stalled (unused)        6 {P}limiter      7 {P}delayed
    8 {P}paused (unused)         9 {P}meta         10 {P}pc
    11 {P}marker
  ARGV
    1 {P}
    2 now (ms): processedOn and promotion cut-off
    3 FetchOpts (msgpack map: token, lockDuration, limiter, name)
  Returns
    [flat HGETALL, id, 0, 0]  a job, locked with the token
    [0, 0, pttl, 0]           rate limited
    [0, 0, 0, dueMs]          nothing ready, earliest delayed job due then
    [0, 0, 0, 0]              paused/maxed or nothing at all
  Events: waiting {prev delayed} per promoted job, active {prev waiting}.
]]
--- @include "includes/fetchNextJob"

local opts = cmsgpack.unpack(ARGV[3])

return fetchNextJob(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[9], KEYS[10], KEYS[11],
  ARGV[1], ARGV[2], opts, true)
