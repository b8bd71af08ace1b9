--[[
  removeUnprocessedChildren: remove, recursively, every child of a job that
  has not been processed yet. Locked (running) children and failed ones are
  kept, and so are processed children (docs/flows.md §Removing).

  KEYS
    1 {P}<id>   2 {P}meta (unused: kept for the frozen KEYS order)
  ARGV
    1 {P}   2 job id
  Returns nothing (nil).
  Events: removed {jobId, prev} (capped) on each removed child's queue.
]]
--- @include "includes/removeJobWithChildren"

removeJobChildren(ARGV[1], KEYS[1], {
  removeChildren = true,
  ignoreProcessed = true,
  ignoreLocked = true,
})
