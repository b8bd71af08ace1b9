--[[
  filterOutJobsToIgnore(jobIds, ignoreSet) -> jobIds without the ignored ones

  ignoreSet is a table keyed by job id (value true), or nil for "keep all".
  Used to spare the current job scheduler iterations.
]]
local function filterOutJobsToIgnore(jobIds, ignoreSet)
  if not ignoreSet then
    return jobIds
  end
  local kept = {}
  for _, jobId in ipairs(jobIds) do
    if not ignoreSet[jobId] then
      kept[#kept + 1] = jobId
    end
  end
  return kept
end
