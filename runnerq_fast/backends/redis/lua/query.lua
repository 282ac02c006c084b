-- runnerq-fast: one listing page, a bounded count, or the rows an action applies to, over one
-- queue's activities in (created ms, id) order. Read-only.
-- KEYS[1] = P = "rq:{<queue>}:"; reads P.."st:"..status, P.."ct:"..type, P.."ch:"..parent,
--   P.."a:"..id.
-- ARGV[1]: a JSON object (absent key = no condition):
--   mode "page" | "count" | "pick"; desc (bool); limit (page size, count cap, or rows to pick);
--   rsl (rows examined at most by conditions checked row by row); cs, ci (cursor: created ms, id);
--   lo, hi (created at or after / before, ms); statuses, types, ids (arrays); parent (id);
--   priorities (array); meta (object: every key = value must match).
-- Sources: the ids given; else the children set of the parent; else one ZSET per type or per
-- status, whichever holds fewer ids (ZCARD); the other condition, priorities and metadata are
-- then checked row by row (HMGET), at most rsl rows per call (ids whose hash has expired count too).
-- Returns:
--   page:  {next cursor created ('' = none), next cursor id, then per item: id and the 16 fields
--          t s pr p m rc mr to c r sa fa l e ik pa};
--   count: {count, 1 if exact else 0};
--   pick:  {next cursor created ('' = none), next cursor id, then per row: id, status, priority}.
local q = cjson.decode(ARGV[1])
local desc = q.desc
local limit = tonumber(q.limit)
local rsl = tonumber(q.rsl)
local ALL = {'pending', 'scheduled', 'processing', 'retrying', 'completed', 'failed', 'dead_letter', 'cancelled'}

local function set_of(list)
  if not list then return nil end
  local t = {}
  for _, v in ipairs(list) do t[v] = true end
  return t
end

local want_status, want_type = set_of(q.statuses), set_of(q.types)
local want_priority = set_of(q.priorities)
local meta = q.meta
local check_status, check_type, check_parent = false, false, false
local lo, hi, cs, ci = q.lo, q.hi, q.cs, q.ci

local function before_cursor(score, member)
  -- whether (score, member) comes after the cursor in listing order (and within the range)
  if lo and score < lo then return false end
  if hi and score >= hi then return false end
  if cs then
    if desc then
      return score < cs or (score == cs and member < ci)
    end
    return score > cs or (score == cs and member > ci)
  end
  return true
end

-- ---------------------------------------------------------------- sources
local sources = {}
local CH = 256

local function zset_source(key)
  local src = {key = key, buf = {}, i = 1, off = 0, done = false}
  if desc then
    src.from = '+inf'
    if cs and (not hi or cs < hi) then src.from = cs elseif hi then src.from = '(' .. hi end
    src.to = lo or '-inf'
  else
    src.from = '-inf'
    if cs and (not lo or cs >= lo) then src.from = cs elseif lo then src.from = lo end
    src.to = hi and ('(' .. hi) or '+inf'
  end
  return src
end

local function fill(src)
  local r
  if desc then
    r = redis.call('ZRANGE', src.key, src.from, src.to, 'BYSCORE', 'REV', 'LIMIT', src.off, CH, 'WITHSCORES')
  else
    r = redis.call('ZRANGE', src.key, src.from, src.to, 'BYSCORE', 'LIMIT', src.off, CH, 'WITHSCORES')
  end
  src.off = src.off + #r / 2
  if #r / 2 < CH then src.done = true end
  src.buf, src.i = {}, 1
  for j = 1, #r, 2 do
    local score, member = tonumber(r[j + 1]), r[j]
    if before_cursor(score, member) then src.buf[#src.buf + 1] = {score, member} end
  end
end

local function head(src)
  while src.i > #src.buf do
    if src.done then return nil end
    fill(src)
  end
  return src.buf[src.i]
end

local function better(a, b)
  if desc then return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2]) end
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

if q.ids then
  local rows = {}
  for _, id in ipairs(q.ids) do
    local c = redis.call('HGET', P .. 'a:' .. id, 'c')
    if c and before_cursor(tonumber(c), id) then rows[#rows + 1] = {tonumber(c), id} end
  end
  table.sort(rows, better)
  sources[1] = {buf = rows, i = 1, done = true}
  check_status, check_type = want_status ~= nil, want_type ~= nil
elseif q.parent then
  sources[1] = zset_source(P .. 'ch:' .. q.parent)
  check_status, check_type = want_status ~= nil, want_type ~= nil
else
  local statuses = q.statuses or ALL
  local by_type = q.types ~= nil
  if q.types and q.statuses then
    local nt, ns = 0, 0
    for _, t in ipairs(q.types) do nt = nt + redis.call('ZCARD', P .. 'ct:' .. t) end
    for _, s in ipairs(statuses) do ns = ns + redis.call('ZCARD', P .. 'st:' .. s) end
    by_type = nt <= ns
  end
  if by_type then
    for _, t in ipairs(q.types) do sources[#sources + 1] = zset_source(P .. 'ct:' .. t) end
    check_status = want_status ~= nil
  else
    for _, s in ipairs(statuses) do sources[#sources + 1] = zset_source(P .. 'st:' .. s) end
    check_type = want_type ~= nil
  end
end

local checked = check_status or check_type or want_priority ~= nil or meta ~= nil

local function next_row()
  local best, bi = nil, nil
  for i, src in ipairs(sources) do
    local h = head(src)
    if h and (not best or better(h, best)) then best, bi = h, i end
  end
  if best then sources[bi].i = sources[bi].i + 1 end
  return best
end

local function passes(id)
  -- the fields every check needs, or nil when the activity is gone (hash expired)
  local h = redis.call('HMGET', P .. 'a:' .. id, 's', 't', 'pr', 'm')
  if not h[1] then return nil, nil end
  if check_status and not want_status[h[1]] then return false, h end
  if check_type and not want_type[h[2]] then return false, h end
  if want_priority and not want_priority[tonumber(h[3])] then return false, h end
  if meta then
    local ok, decoded = pcall(cjson.decode, h[4])
    if not ok or type(decoded) ~= 'table' then return false, h end
    for k, v in pairs(meta) do
      if decoded[k] ~= v then return false, h end
    end
  end
  return true, h
end

-- ------------------------------------------------------------------ walk
local FIELDS = {'t', 's', 'pr', 'p', 'm', 'rc', 'mr', 'to', 'c', 'r', 'sa', 'fa', 'l', 'e', 'ik', 'pa'}
local mode = q.mode

local function reply(cursor_row, hits)
  local out = {cursor_row and tostring(cursor_row[1]) or '', cursor_row and cursor_row[2] or ''}
  for _, hit in ipairs(hits) do
    out[#out + 1] = hit[2]
    if mode == 'page' then
      out[#out + 1] = redis.call('HMGET', P .. 'a:' .. hit[2], unpack(FIELDS))
    else
      out[#out + 1] = hit[3]
      out[#out + 1] = hit[4]
    end
  end
  return out
end

local examined, n = 0, 0
local hits = {}
while true do
  local row = next_row()
  if not row then break end
  if mode == 'count' and examined >= rsl + limit then return {n, 0} end  -- more than one call examines
  local ok, h = passes(row[2])
  if checked or ok == nil then examined = examined + 1 end
  if ok then
    if mode == 'count' then
      if n == limit then return {n, 0} end
      n = n + 1
    elseif mode == 'page' then
      if #hits == limit then return reply(hits[#hits], hits) end
      hits[#hits + 1] = row
    else
      hits[#hits + 1] = {row[1], row[2], h[1], h[3]}
      if #hits == limit then return reply(row, hits) end
    end
  elseif mode ~= 'count' and examined >= rsl then
    return reply(row, hits)  -- examined enough rows for one call: resumable after this one
  end
end
if mode == 'count' then return {n, 1} end
return reply(nil, hits)
