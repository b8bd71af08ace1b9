--[[
  moveToFinished: complete or finally fail an active job, apply retention
  and optionally take the next job in the same call (docs/protocol.md §Scripts).

  KEYS
    1 {P}wait     2 {P}active    3 {P}prioritized  4 {P}events
    5 {P}stalled  6 {P}limiter   7 {P}delayed      8 {P}paused (unused)
    9 {P}meta     10 {P}pc
    11 target set {P}completed | {P}failed
    12 job key {P}<id>
    13 metrics key {P}metrics:completed | {P}metrics:failed
    14 {P}marker
  ARGV
    1 job id
    2 now (ms): finishedOn and the target-set score
    3 field: returnvalue | failedReason
    4 value: return value JSON | raw failure message
    5 target: completed | failed
    6 fetch next: 1 | 0
    7 {P}
    8 FinishOpts (msgpack map: token, name, keepJobs, limiter, lockDuration,
      attempts, maxMetricsSize, ...; keepJobs, attempts and maxMetricsSize
      may be missing: keep every job, 0, metrics off)
    9 FieldsToUpdate (msgpack) or ""
  Returns
    0, a next-job reply (see moveToActive), or -1 -2 -3 -4 -6 -9.
  Events: completed | failed (+ retries-exhausted), drained, and those of
  fetch-next, flows and dedup requeue.
]]
--- @include "includes/finishJob"

return finishJob(KEYS, KEYS[11], KEYS[12], KEYS[13], ARGV)
