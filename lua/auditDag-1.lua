--[[
  auditDag: EchoMQ extension, read-only. The DAG invariants of a queue's
  nodes that several nodes wait for (docs/flows.md §DAGs), one SSCAN page
  of {P}dag:pending per call:
    D1  a finished node (completed, failed with a failure rule, or removed)
        is still pending for extra parents: no DagReleaser handed it over
        (holds only at quiescence: a releaser acts right after the finish)
    D2  a node is in {P}dag:pending without a {P}<id>:dag:parents hash
        (the add writes both, the release removes both in one call)

  KEYS
    1 {P}dag:pending
  ARGV
    1 {P}   2 SSCAN cursor ("0": from the start)   3 COUNT
  Returns
    {next cursor ("0": done), {check, node id, detail, ...}}
]]
local out = {}
local prefix = ARGV[1]
local reply = redis.call("SSCAN", KEYS[1], ARGV[2], "COUNT", ARGV[3])
for _, id in ipairs(reply[2]) do
  local jobKey = prefix .. id
  local parents = redis.call("HLEN", jobKey .. ":dag:parents")
  if parents == 0 then
    out[#out + 1] = "D2"
    out[#out + 1] = id
    out[#out + 1] = "in dag:pending without dag:parents"
  else
    local finished = nil
    if redis.call("EXISTS", jobKey) == 0 then
      finished = "removed"
    elseif redis.call("ZSCORE", prefix .. "completed", id) then
      finished = "completed"
    elseif redis.call("ZSCORE", prefix .. "failed", id) then
      local descriptor = redis.call("HGET", jobKey, "parent")
      local ok, flags = pcall(cjson.decode, descriptor or "")
      if ok and type(flags) == "table" and (flags["fpof"] or flags["cpof"] or flags["idof"] or flags["rdof"]) then
        finished = "failed"
      end
    end
    if finished then
      out[#out + 1] = "D1"
      out[#out + 1] = id
      out[#out + 1] = finished .. ", still pending for " .. parents .. " extra parent(s)"
    end
  end
end
return {reply[1], out}
