--[[
  H21 add job from scheduler: store and route one iteration
  `repeat:<schedulerId>:<millis>` (H7 store-and-enqueue), delayed when its
  time is in the future.
  addJobFromScheduler(prefix, jobId, opts, name, data, timestamp, schedulerId,
                      delay, maxEvents)
    opts  decoded iteration options; `delay` and `jobId` are overwritten here
          because the client cannot know the slot the script settled on
]]
--- @include "includes/storeAndEnqueueJob"

local function addJobFromScheduler(prefix, jobId, opts, name, data, timestamp, schedulerId, delay,
                                   maxEvents)
  opts["delay"] = delay
  opts["jobId"] = jobId
  storeAndEnqueueJob(prefix, jobId, name, data, opts, timestamp, nil, nil, schedulerId, maxEvents)
end
