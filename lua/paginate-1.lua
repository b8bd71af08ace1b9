--[[
  paginate: one page of a set (dependencies) or hash (processed, failed) of
  a parent, by SSCAN/HSCAN. Sets are unordered: pages are only stable while
  the key does not change (docs/flows.md §Reading children). Read-only.

  KEYS
    1 the set or hash
  ARGV
    1 page start   2 page end (-1 = to the last element)
    3 scan cursor  4 items already scanned before the cursor
    5 max scan iterations   6 "1" to also return each item's job hash, absent otherwise
  Returns
    {cursor, offset, items, total, jobs}: items are members (set) or
    {field, value} pairs (hash); jobs are HGETALL replies, when asked
    {0, 0, {}, 0} for a missing key; an error for other types
]]
local key = KEYS[1]
local kind = redis.call("TYPE", key)["ok"]
local scan, count, step
if kind == "none" then
  return { 0, 0, {}, 0 }
elseif kind == "set" then
  scan, count, step = "SSCAN", "SCARD", 1
elseif kind == "hash" then
  scan, count, step = "HSCAN", "HLEN", 2
else
  return redis.error_reply("Pagination is only supported for sets and hashes.")
end

local total = redis.call(count, key)
local pageStart = tonumber(ARGV[1])
local pageEnd = tonumber(ARGV[2])
if pageEnd == -1 then
  pageEnd = total
end
-- One past the last wanted position.
local stop = pageStart + (pageEnd - pageStart) + 1
local cursor = ARGV[3]
local offset = tonumber(ARGV[4])
local maxIterations = tonumber(ARGV[5])
local withJobs = ARGV[6] ~= nil

local items, jobs = {}, {}
local iterations = 0
local function page()
  repeat
    local reply = redis.call(scan, key, cursor, "COUNT", 100)
    cursor = reply[1]
    local members = reply[2]
    if #members == 0 then
      return
    end
    local chunkEnd = offset + #members / step
    if chunkEnd < pageStart then
      offset = chunkEnd
    elseif offset > stop then
      return
    else
      for i = 1, #members, step do
        if offset >= stop then
          return
        end
        if offset >= pageStart then
          if withJobs then
            jobs[#jobs + 1] = redis.call("HGETALL", members[i])
          end
          if step == 2 then
            items[#items + 1] = { members[i], members[i + 1] }
          else
            items[#items + 1] = members[i]
          end
        end
        offset = offset + 1
      end
    end
    iterations = iterations + 1
  until cursor == "0" or iterations >= maxIterations
end
page()
return { cursor, offset, items, total, jobs }
