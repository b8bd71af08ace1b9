--[[
  addStandardJob: add a job that is neither delayed nor prioritized to wait
  (docs/protocol.md §Scripts).

  KEYS
    1 {P}wait          2 {P}paused (unused)   3 {P}meta
    4 {P}id            5 {P}completed         6 {P}delayed
    7 {P}active        8 {P}events            9 {P}marker
  ARGV
    1 AddArgs (msgpack array: prefix, custom id, name, timestamp, parent key,
      parent dependencies key, parent descriptor, repeat job key, dedup key,
      defer parent release: 1 inside a flow insert, see handleDuplicatedJob)
    2 job data (JSON text, stored verbatim)
    3 JobOpts (msgpack map, stored form)
  Returns
    the job id; the existing id for a duplicate custom id; the owner id when
    deduplicated; -5 missing parent; -7 parent cannot be replaced.
  Events: added, waiting (or duplicated / deduplicated, removed).
]]
--- @include "includes/addStandardJob"

return addStandardJob(KEYS, ARGV[1], ARGV[2], ARGV[3])
