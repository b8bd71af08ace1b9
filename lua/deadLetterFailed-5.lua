--[[
  deadLetterFailed: move a job already in its queue's `failed` set to the
  dead-letter queue (EchoMQ extension, docs/protocol.md §Dead letters): how
  the dead-letter follower handles the final failures of other workers
  (BullMQ Node's). A job no longer in `failed` (moved already, retried,
  removed) or of a flow is left alone.

  KEYS
    1 {P}failed   2 {D}failed   3 {D}id   4 {D}events   5 {D}meta
  ARGV
    1 job id
    2 {P}
    3 source queue key "<prefix>:<queue>"
    4 {D}
    5 the dead-letter queue's bound (0: none)
  Returns
    the dead letter's id, or 0 when nothing was moved.
  Events: deadLettered on {D}events.
]]
--- @include "includes/deadLetter"

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = deadLetter(KEYS[1], ARGV[2] .. ARGV[1], ARGV[1], ARGV[3], ARGV[4], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], string.format("%d", now), ARGV[5])
return id or 0
