-- runnerq-fast: one bounded step of a filtered keyset walk (read only): the members of some
-- lex-ordered index sets, merged in (created, id) order between two BYLEX bounds, checked
-- against the filter on their hashes.
-- KEYS[1] = P = "rq:{<queue>}:"; reads the given index sets (P.."st:"..status, P.."ty:"..type,
--   P.."kids:"..parent) and P.."a:"..id.
-- ARGV: newest first (1/0), min bound, max bound (BYLEX syntax: "-", "+", "[x", "(x"),
--   matches wanted, rows to examine at most, return snapshot fields (1/0),
--   then lists, each as a count followed by that many values (count -1 = no condition):
--   index set names (relative to P), statuses, types, priorities, metadata keys and values
--   (2 values per pair); then the parent id ("" = none), then the snapshot field names.
-- Returns: {matching members (at most wanted), their snapshot field values (flat, when asked),
--   last member examined ("" if none), 1 if the sets were walked to the end else 0,
--   rows examined, ids of unreadable hashes}.
-- Members are compared by created time (numbers), then by id bytes (memcmp, as Redis orders
-- them): Lua's string "<" follows the server's locale, so it is not used.
local newest = ARGV[1] == '1'
local lo, hi = ARGV[2], ARGV[3]
local want, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
local fetch = ARGV[6] == '1'
local at = 7

local function list()
  local n = tonumber(ARGV[at])
  at = at + 1
  if n < 0 then return nil end
  local out = {}
  for j = 1, n do out[j] = ARGV[at + j - 1] end
  at = at + n
  return out
end

local function set(values)
  if not values then return nil end
  local s = {}
  for _, v in ipairs(values) do s[v] = true end
  return s
end

local index = list()
local statuses = set(list())
local types = set(list())
local priorities = set(list())
local meta = list()
local parent = ARGV[at]
at = at + 1
local fields = {}
for j = at, #ARGV do fields[#fields + 1] = ARGV[j] end
if parent == '' then parent = nil end
if meta and #meta == 0 then meta = nil end

local function before(a, b) -- a sorts before b in (created, id) byte order
  if a[2] ~= b[2] then return a[2] < b[2] end
  local x, y = a[1], b[1]
  local n = math.min(#x, #y)
  for i = 17, n do
    local p, q = string.byte(x, i), string.byte(y, i)
    if p ~= q then return p < q end
  end
  return #x < #y
end

local function first(a, b) -- a comes first in the walk's direction
  if newest then return before(b, a) end
  return before(a, b)
end

local wanted_fields = {'s', 't', 'pr', 'pa'}
if meta then wanted_fields[5] = 'm' end

-- nil: unreadable; false: no match; true: match
local function check(id)
  local h = redis.call('HMGET', P .. 'a:' .. id, unpack(wanted_fields))
  if not h[1] then return false, false end -- gone (an expired result): not a match, not unreadable
  if not h[2] then return nil end
  if statuses and not statuses[h[1]] then return false end
  if types and not types[h[2]] then return false end
  if parent and h[4] ~= parent then return false end
  if priorities then
    local pr = tonumber(h[3])
    if not pr then return nil end
    if not priorities[tostring(pr)] then return false end
  end
  if meta then
    if not h[5] then return nil end
    local ok, doc = pcall(cjson.decode, h[5])
    if not ok then return nil end
    if type(doc) ~= 'table' then return false end
    for j = 1, #meta, 2 do
      local v = doc[meta[j]]
      if type(v) ~= 'string' or v ~= meta[j + 1] then return false end
    end
  end
  return true
end

local B = 200
local matches, rows, bad = {}, {}, {}
local examined, last, ended = 0, '', 0
local done = false
while not done do
  local merged = {}
  local horizon = nil
  local full = false
  for _, k in ipairs(index) do
    local got
    if newest then
      got = redis.call('ZRANGE', P .. k, hi, lo, 'BYLEX', 'REV', 'LIMIT', 0, B)
    else
      got = redis.call('ZRANGE', P .. k, lo, hi, 'BYLEX', 'LIMIT', 0, B)
    end
    for j = 1, #got do
      local e = {got[j], tonumber(string.sub(got[j], 1, 15))}
      merged[#merged + 1] = e
      -- a full batch may hide later members of its set: the walk stops at its edge
      if j == #got and #got == B then
        full = true
        if not horizon or first(e, horizon) then horizon = e end
      end
    end
  end
  if #index > 1 then table.sort(merged, first) end
  for _, e in ipairs(merged) do
    if horizon and first(horizon, e) then break end
    local m = e[1]
    local id = string.sub(m, 17)
    examined = examined + 1
    last = m
    local ok, unreadable = check(id)
    if ok then
      matches[#matches + 1] = m
      if fetch then
        local v = redis.call('HMGET', P .. 'a:' .. id, unpack(fields))
        for j = 1, #fields do rows[#rows + 1] = v[j] or false end
      end
    elseif ok == nil then
      bad[#bad + 1] = id
    end
    if #matches >= want or examined >= budget then
      done = true
      break
    end
  end
  if not done then
    if not full then
      ended = 1
      done = true
    elseif newest then
      hi = '(' .. last
    else
      lo = '(' .. last
    end
  end
end
return {matches, rows, last, ended, examined, bad}
