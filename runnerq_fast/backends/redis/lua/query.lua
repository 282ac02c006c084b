-- runnerq-fast: one bounded step of a filtered keyset walk (read only): the members of some
-- lex-ordered index sets, merged in (created, id) order between two BYLEX bounds, checked
-- against the filter on their hashes.
-- KEYS[1] = P = "rq:{<queue>}:"; reads the given index sets (P.."st:"..status, P.."ty:"..type,
--   P.."kids:"..parent), P.."lease" (for "st:processing", which is not kept: the processing ids
--   are read from the lease set, sorted here) and P.."a:"..id.
-- ARGV: newest first (1/0), min bound, max bound (BYLEX syntax: "-", "+", "[x", "(x"),
--   matches wanted, rows to examine at most, return snapshot fields (1/0),
--   then lists, each as a count followed by that many values (count -1 = no condition):
--   index set names (relative to P), statuses, types, priorities, metadata keys and values
--   (2 values per pair); then the parent id ("" = none), then the snapshot field names.
-- Returns: {matching members (at most wanted), their snapshot field values (flat, when asked),
--   last member examined ("" if none), 1 if the sets were walked to the end else 0,
--   rows examined, ids of unreadable hashes}.
-- Members must be compared in byte order (memcmp, as Redis orders them). Lua's string "<" follows
-- the server's collation locale: it is used only when it orders a few telling pairs of characters
-- as bytes do (the "C" locale); else members are compared by created time (numbers), then by id.
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

-- An entry: {member, created ms, then (lazily) the id as three numbers when it is 32 lowercase
-- hex digits (their numeric order is their byte order), else false}.
local function entry(m)
  return {m, tonumber(string.sub(m, 1, 15))}
end

local function hexkey(e)
  if e[3] == nil then
    local id = string.sub(e[1], 17)
    if #id == 32 and not string.find(id, '[^0-9a-f]') then
      e[3] = tonumber(string.sub(id, 1, 13), 16)
      e[4] = tonumber(string.sub(id, 14, 26), 16)
      e[5] = tonumber(string.sub(id, 27, 32), 16)
    else
      e[3] = false
    end
  end
  return e[3]
end

local function before(a, b) -- a sorts before b in (created, id) byte order
  if a[2] ~= b[2] then return a[2] < b[2] end
  if hexkey(a) and hexkey(b) then
    if a[3] ~= b[3] then return a[3] < b[3] end
    if a[4] ~= b[4] then return a[4] < b[4] end
    return a[5] < b[5]
  end
  local x, y = a[1], b[1]
  local n = math.min(#x, #y)
  for i = 17, n do
    local p, q = string.byte(x, i), string.byte(y, i)
    if p ~= q then return p < q end
  end
  return #x < #y
end

local BYTE_ORDER = ('B' < 'a') and ('Z' < '_') and ('_' < 'a') and ('9' < ':') and (':' < 'A')
  and ('-' < '0') and ('a' < 'b') and not ('b' < 'a')

local function lt(a, b)
  if BYTE_ORDER then return a[1] < b[1] end
  return before(a, b)
end

local function first(a, b) -- a comes first in the walk's direction
  if newest then return lt(b, a) end
  return lt(a, b)
end

-- whether entry e lies within the BYLEX bounds lo and hi
local LO, HI = nil, nil
if lo ~= '-' then LO = entry(string.sub(lo, 2)) end
if hi ~= '+' then HI = entry(string.sub(hi, 2)) end
local function inrange(e)
  if LO then
    if string.sub(lo, 1, 1) == '[' then
      if lt(e, LO) then return false end
    elseif not lt(LO, e) then
      return false
    end
  end
  if HI then
    if string.sub(hi, 1, 1) == '[' then
      if lt(HI, e) then return false end
    elseif not lt(e, HI) then
      return false
    end
  end
  return true
end

-- metadata values any JSON encoder writes verbatim (printable ASCII but for quote, backslash, slash)
local PLAIN = {}
if meta then
  for j = 2, #meta, 2 do PLAIN[j] = not string.find(meta[j], '[^%w !#-.0-~]') and not string.find(meta[j], '[\\/"]') end
end

local wanted_fields = {'s', 't', 'n', 'pa'}
if meta then wanted_fields[5] = 'm' end

-- nil: unreadable; false: no match; true: match
local function check(id)
  local h = redis.call('HMGET', P .. 'a:' .. id, unpack(wanted_fields))
  if not h[1] then return false end -- gone (an expired result): not a match, not unreadable
  if statuses and not statuses[h[1]] then return false end
  if types and not types[h[2]] then return false end
  if parent and h[4] ~= parent then return false end
  if priorities then
    local pr = tonumber(rq_nums(h[3])[NPR])
    if not pr then return nil end
    if not priorities[tostring(pr)] then return false end
  end
  if meta then
    local m = h[5] or '{}' -- no field m: no metadata
    for j = 2, #meta, 2 do -- cheap test first: a plain value must appear as such in the JSON text
      if PLAIN[j] and not string.find(m, meta[j], 1, true) then return false end
    end
    local ok, doc = pcall(cjson.decode, m)
    if not ok then return nil end
    if type(doc) ~= 'table' then return false end
    for j = 1, #meta, 2 do
      local v = doc[meta[j]]
      if type(v) ~= 'string' or v ~= meta[j + 1] then return false end
    end
  end
  return true
end

-- Conditions the index sets do not answer make the walk examine rows that do not match.
local checked = priorities or meta or (statuses and types) or (parent and (statuses or types))
local B = 200
if not checked then B = math.max(8, math.min(200, want + 1)) end

-- k-way merge of the index sets, each read B members at a time from its own bound
local sets = {}
for _, k in ipairs(index) do
  if k == 'st:processing' then
    -- the processing ids: every member of the lease set within the bounds, sorted here
    local buf = {}
    for _, id in ipairs(redis.call('ZRANGE', P .. 'lease', 0, -1)) do
      local n = redis.call('HGET', P .. 'a:' .. id, 'n')
      if n then
        local e = entry(rq_mem(n, id))
        if inrange(e) then buf[#buf + 1] = e end
      end
    end
    table.sort(buf, first)
    sets[#sets + 1] = {buf = buf, pos = 1, more = false}
  else
    sets[#sets + 1] = {key = P .. k, buf = {}, pos = 1, more = true, lo = lo, hi = hi}
  end
end

local function refill(s)
  local got
  if newest then
    got = redis.call('ZRANGE', s.key, s.hi, s.lo, 'BYLEX', 'REV', 'LIMIT', 0, B)
  else
    got = redis.call('ZRANGE', s.key, s.lo, s.hi, 'BYLEX', 'LIMIT', 0, B)
  end
  s.buf, s.pos, s.more = {}, 1, #got == B
  for j = 1, #got do s.buf[j] = entry(got[j]) end
  if #got > 0 then
    if newest then s.hi = '(' .. got[#got] else s.lo = '(' .. got[#got] end
  end
end

local matches, rows, bad = {}, {}, {}
local examined, last, ended = 0, '', 0
while true do
  local best = nil
  for i = 1, #sets do
    local s = sets[i]
    if s.pos > #s.buf and s.more then refill(s) end
    local e = s.buf[s.pos]
    if e and (not best or first(e, best.buf[best.pos])) then best = s end
  end
  if not best then
    ended = 1
    break
  end
  local m = best.buf[best.pos][1]
  best.pos = best.pos + 1
  local id = string.sub(m, 17)
  examined = examined + 1
  last = m
  local ok = check(id)
  if ok then
    matches[#matches + 1] = m
    if fetch then
      local v = redis.call('HMGET', P .. 'a:' .. id, unpack(fields))
      for j = 1, #fields do rows[#rows + 1] = v[j] or false end
    end
  elseif ok == nil then
    bad[#bad + 1] = id
  end
  if #matches >= want or examined >= budget then break end
end
return {matches, rows, last, ended, examined, bad}
