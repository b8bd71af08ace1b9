--[[
  The relay's topic grammar (docs/protocol.md §Relay), the same in every
  relay script:

  * a topic is 1 to 512 bytes of dot-separated segments, at most 16, each
    segment one or more of A-Z a-z 0-9 _ : % - ;
  * a pattern may also use "*" for exactly one segment and, as its last
    segment only, ">" for one or more trailing segments;
  * node and endpoint ids are 1 to 64 bytes of A-Z a-z 0-9 _ - .
]]

-- Segments of a topic or pattern, nil when it breaks the grammar.
local function relaySegments(text, wildcards)
  if type(text) ~= "string" then
    return nil
  end
  local size = #text
  if size == 0 or size > 512 then
    return nil
  end
  local parts = {}
  local from = 1
  while true do
    local dot = string.find(text, ".", from, true)
    local piece
    if dot then
      piece = string.sub(text, from, dot - 1)
    else
      piece = string.sub(text, from)
    end
    parts[#parts + 1] = piece
    if #parts > 16 then
      return nil
    end
    if not dot then
      break
    end
    from = dot + 1
  end
  local last = #parts
  for i = 1, last do
    local piece = parts[i]
    local wild = wildcards and (piece == "*" or (piece == ">" and i == last))
    if not wild and not string.match(piece, "^[%w_:%%%-]+$") then
      return nil
    end
  end
  return parts
end

-- Whether a pattern's segments select a topic's segments.
local function relayMatches(pattern, topic)
  for i = 1, #pattern do
    local piece = pattern[i]
    if piece == ">" then
      return #topic >= i
    end
    local word = topic[i]
    if word == nil or (piece ~= "*" and piece ~= word) then
      return false
    end
  end
  return #pattern == #topic
end

local function relayIsWildcard(parts)
  for i = 1, #parts do
    if parts[i] == "*" or parts[i] == ">" then
      return true
    end
  end
  return false
end

-- The bucket a wildcard pattern is indexed under: its first segment, or "*"
-- when that is itself a wildcard.
local function relayRoot(parts)
  local first = parts[1]
  if first == "*" or first == ">" then
    return "*"
  end
  return first
end

local function relayIsId(id)
  return type(id) == "string" and #id >= 1 and #id <= 64 and
    string.match(id, "^[%w_%-]+$") ~= nil
end
