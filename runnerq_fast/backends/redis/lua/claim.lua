-- runnerq-fast: promote due scheduled activities, then claim up to N in SPEC order.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."sched", P.."types", P.."ready:"..type (or
--   P.."susp:"..type), P.."a:"..id, P.."lease", P.."st:"..status, P.."counts", P.."events".
-- ARGV: limit, lease_ms, claim token, worker id, the ready sets to claim from ("ready:", or
--   "susp:" for the suspects, claimed one at a time), then the activity types (none = every type).
-- Returns: 5 per claimed activity, in claim order: id, type, payload, metadata, and its numbers
--   as stored (hash field n, see rq_nums; '' for a missing field: the caller dead-letters an
--   activity whose fields do not decode, with ack.lua). A due activity
--   that cannot be scored (rq_corrupt) is dead-lettered here, alone (published on P.."done").
local limit = tonumber(ARGV[1])
local deadline = tostring(NOW + tonumber(ARGV[2])) -- as text: formatted once, not twice per activity
local token, worker = ARGV[3], ARGV[4]
local from = ARGV[5]
local claim = token .. '\31' .. NOWS .. '\31' .. deadline -- the hash field k of every activity claimed

local DUE_CHECKS = {NPR, 'priority', NRC, 'retry_count', NR, 'ready_at_ms'}
local dead = {}
local due = redis.call('ZRANGEBYSCORE', P .. 'sched', '-inf', NOW, 'LIMIT', 0, 1000)
if #due > 0 then
  for _, id in ipairs(due) do
    local h = redis.call('HMGET', P .. 'a:' .. id, 't', 'n', 's', 'su')
    if h[1] and READY[h[3]] then
      local nums = rq_nums(h[2])
      local bad = rq_corrupt(nums, DUE_CHECKS)
      if bad then
        rq_finish(id, h[1], rq_mem_of(h[2], id, h[1]), h[3], 'dead_letter', nil, bad, 0)
        dead[#dead + 1] = id
      else
        rq_make_ready(id, h[1], tonumber(nums[NPR]), tonumber(nums[NRC]), tonumber(nums[NR]), h[4])
      end
    end
  end
  redis.call('ZREM', P .. 'sched', unpack(due))
  rq_flush()
end

local types
if #ARGV > 5 then
  types = {}
  for i = 6, #ARGV do types[#types + 1] = ARGV[i] end
else
  types = redis.call('SMEMBERS', P .. 'types')
end

-- candidates: the first `limit` of every filtered type, merged by (score, id). When only one
-- of the types has ready work (the usual case) its first `limit` are taken in the same order
-- without a merge (no candidate tables, no sort, no scores).
local ids, idtypes = {}, nil
local only, nonempty = nil, 0
if #types == 1 then
  only = types[1]
else
  for _, typ in ipairs(types) do
    if redis.call('ZCARD', P .. from .. typ) > 0 then
      nonempty = nonempty + 1
      only = typ
    end
  end
  if nonempty > 1 then only = nil end
end
if only then
  -- ZRANGE + ZREMRANGEBYRANK, not ZPOPMIN: the same members without their scores formatted
  local set = P .. from .. only
  ids = redis.call('ZRANGE', set, 0, limit - 1)
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1) end
elseif nonempty > 1 then
  local cand = {}
  for _, typ in ipairs(types) do
    local head = redis.call('ZRANGE', P .. from .. typ, 0, limit - 1, 'WITHSCORES')
    for i = 1, #head, 2 do
      cand[#cand + 1] = {tonumber(head[i + 1]), head[i], typ}
    end
  end
  table.sort(cand, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  idtypes = {}
  for i, c in ipairs(cand) do ids[i], idtypes[i] = c[2], c[3] end
end

local out, o = {}, 0 -- o = #out
-- rq_move and rq_zadd unrolled for the claimed: their index members by old status, the lease
-- set's arguments and, when they are of several types, the counter changes by (old status, type),
-- written after the loop (of one type: the number of members by old status)
local gone, leases, moved = {}, {}, {}
local n = 0
local gold, gmembers, g = nil, nil, 0 -- the old status of the last claimed, gone[gold] and its length
local KEY_PREFIX = P .. 'a:'
for i = 1, #ids do
  if n >= limit then break end
  local id = ids[i]
  local typ = only
  if idtypes then
    typ = idtypes[i]
    rq_zrem(P .. from .. typ, id)
  end
  local k = KEY_PREFIX .. id
  local h = rcall('HMGET', k, 's', 'p', 'm', 'n')
  local old = h[1]
  if old == 'pending' or (old and READY[old]) then
    n = n + 1
    local ef, ev
    if EVRUN and EVLKIND == 'claimed' and EVLDETAIL == worker and EVCOUNT + 1 < EVENT_CHUNK then
      -- rq_event(id, 'claimed', worker) inlined: its fast path, when the entry does not fill up
      EVN = EVN + 1
      EVCOUNT = EVCOUNT + 1
      EVLEN = EVLEN + 1
      EVBUF[EVLEN] = id
      ev = EVLVALUE
      local last = EVN % 10
      if last == 0 then EVTENS = 'x:' .. string.format('%d', (EVN - last) / 10) end
      ef = EVTENS .. DIGITS[last]
    else
      ef, ev = rq_event(id, 'claimed', worker)
    end
    rcall('HSET', k, 's', 'processing', 'k', claim, ef, ev)
    if old ~= gold then
      if gold then gmembers.n = g end
      gmembers = gone[old]
      if not gmembers then gmembers = {n = 0}; gone[old] = gmembers; moved[old] = {} end
      gold, g = old, gmembers.n
    end
    g = g + 1
    local nums = h[4] -- rq_mem_of(nums, id, typ) inlined
    local head = nums and NHEADS[nums]
    if head == nil and nums then head = rq_nhead(nums) end
    gmembers[g] = head and head .. id or rq_mem_of(nums, id, typ)
    if idtypes then
      local by_type = moved[old]
      by_type[typ] = (by_type[typ] or 0) + 1
    end
    leases[2 * n - 1] = deadline
    leases[2 * n] = id
    out[o + 1] = id
    out[o + 2] = typ
    out[o + 3] = h[2] or '' -- a missing field: the caller dead-letters it
    out[o + 4] = h[3] or '{}' -- no field m: no metadata
    out[o + 5] = h[4] or ''
    o = o + 5
  end
end
if gold then gmembers.n = g end
for old, members in pairs(gone) do
  local g = members.n
  for j = 1, g, CHUNK do redis.call('ZREM', rq_st(old), unpack(members, j, math.min(j + CHUNK - 1, g))) end
  if idtypes then
    for typ, c in pairs(moved[old]) do
      rq_count(old, typ, -c)
      rq_count('processing', typ, c)
    end
  else
    rq_count(old, only, -g)
    rq_count('processing', only, g)
  end
end
for j = 1, 2 * n, CHUNK do redis.call('ZADD', P .. 'lease', unpack(leases, j, math.min(j + CHUNK - 1, 2 * n))) end
rq_flush()
if #dead > 0 then redis.call('PUBLISH', P .. 'done', table.concat(dead, ',')) end
return out
