--[[
  groupDefaults: EchoMQ extension (docs/groups.md). Reads or replaces the
  queue's group defaults: the concurrency and rate limit of every group
  without settings of its own, for every feeder of the fleet (a worker's
  `group` option writes them when it starts; the last one written holds).

  KEYS
    1 {P}gr:defaults
  ARGV
    1 op: "get", "set" (ARGV 2 concurrency, 3 max, 4 duration ms; "" leaves
      that setting unset) or "clear"
  Returns
    {concurrency, max, duration} as they were before the call ("" unset).
  Events: none (a raised default lets a group at its old bound release again
  when one of its jobs finishes; a lowered one holds at the next release).
]]
local before = redis.call("HMGET", KEYS[1], "concurrency", "max", "duration")
local op = ARGV[1]
if op == "set" or op == "clear" then
  redis.call("DEL", KEYS[1])
end
if op == "set" then
  if ARGV[2] ~= "" then
    redis.call("HSET", KEYS[1], "concurrency", ARGV[2])
  end
  if ARGV[3] ~= "" and ARGV[4] ~= "" then
    redis.call("HSET", KEYS[1], "max", ARGV[3], "duration", ARGV[4])
  end
end
return { before[1] or "", before[2] or "", before[3] or "" }
