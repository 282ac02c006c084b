-- runnerq-fast: enqueue a batch of activities, applying idempotency atomically.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."ready:"..type,
--   P.."types", P.."sched", P.."st:pending", P.."st:scheduled", P.."ty:"..type,
--   P.."kids:"..parent, P.."counts", P.."events", P.."evseq", P.."wake", P.."wake:"..type,
--   P.."idem:"..#type..":"..type..":"..key (STRING: holder id, PX = idempotency ttl; once the
--   reaper removed the holder: "<holder id>\31<its final status>", the same ttl).
-- ARGV (see RedisBackend.enqueue): K, the number of profiles, then K profiles of 9 fields each:
--   type, priority, max_retries, timeout_ms, run_at_ms, metadata, on_duplicate (0 = no key),
--   idempotency ttl ms, parent id ("" = none); then per item: id, payload, the item's profile
--   (1-based, only when K > 1), its idempotency key (only when its profile's on_duplicate > 0).
-- Returns: 3 per item NOT created, in item order: position of the item (1-based), outcome
--   (2 existing, 3 rejected), the holder's id; every other item was created under its own id.
local ARGV = ARGV -- a local: read two or three times per item
local REUSABLE = {failed = true, dead_letter = true, cancelled = true}
local NOWTEXT = string.format('%d', NOW)
local MEMBER_PREFIX = rq_member(NOWTEXT, '') -- every member of this script is MEMBER_PREFIX .. id
local KEY_PREFIX = P .. 'a:'
local K = tonumber(ARGV[1])
local profiles = {}
for i = 1, K do
  local b = 1 + (i - 1) * 9
  local typ, run_at = ARGV[b + 1], tonumber(ARGV[b + 5])
  local pf = {typ = typ, pr = ARGV[b + 2], priority = tonumber(ARGV[b + 2]), mr = ARGV[b + 3], to = ARGV[b + 4],
    m = ARGV[b + 6], on_dup = tonumber(ARGV[b + 7]), ttl = ARGV[b + 8], parent = ARGV[b + 9], n = 0,
    status = 'pending', ready = NOW, ready_text = NOWTEXT}
  if run_at > NOW then pf.status, pf.ready, pf.ready_text = 'scheduled', run_at, ARGV[b + 5] end
  -- the hash field n of every item of the profile (rq_nums): created now, retry count 0
  pf.nums = MEMBER_PREFIX .. pf.ready_text .. '\31' .. pf.pr .. '\0310\031' .. pf.mr .. '\31' .. pf.to
  -- the common case (pending, no key, no parent) is one HSET without a table; others build its arguments
  pf.plain = pf.status == 'pending' and pf.on_dup == 0 and pf.parent == ''
  pf.bare = pf.m == '{}' -- no metadata: the hash gets no field m (read as {})
  pf.zidx, pf.zready = {}, {} -- ZADD arguments: score '0' and member (st:, ty:, kids:); score and id (ready:)
  if pf.status == 'pending' then
    pf.score = string.format('%.17g', rq_score(pf.priority, 0, NOW))
  end
  profiles[i] = pf
end
local out = {}
local pos, item, nargs = 2 + K * 9, 0, #ARGV
-- the current profile pf (number cur) and, in locals, what every item reads of it (n: pf.n while
-- pf is current, written back when another profile or the end comes)
local pf, cur
local typ, on_dup, nums, fast, pending, zidx, zready, score, n
while pos <= nargs do
  item = item + 1
  local id, payload = ARGV[pos], ARGV[pos + 1]
  pos = pos + 2
  local want = 1
  if K > 1 then
    want = tonumber(ARGV[pos])
    pos = pos + 1
  end
  if want ~= cur then
    if pf then pf.n = n end
    pf, cur = profiles[want], want
    typ, on_dup, nums, zidx, zready, score, n = pf.typ, pf.on_dup, pf.nums, pf.zidx, pf.zready, pf.score, pf.n
    fast, pending = pf.plain and pf.bare, pf.status == 'pending'
  end
  local ik = nil
  local create = true
  if on_dup > 0 then
    ik = ARGV[pos]
    pos = pos + 1
    local ikey = P .. 'idem:' .. #typ .. ':' .. typ .. ':' .. ik
    local holder = redis.call('GET', ikey)
    if holder then
      local hs
      local sep = string.find(holder, '\31', 1, true)
      if sep then -- the reaper removed the holder: "<id>\31<its final status>" until the key expires
        holder, hs = string.sub(holder, 1, sep - 1), string.sub(holder, sep + 1)
      else
        hs = redis.call('HGET', KEY_PREFIX .. holder, 's')
      end
      if hs then
        if on_dup == 2 or (on_dup == 3 and not REUSABLE[hs]) then
          create = false
          out[#out + 1] = item
          out[#out + 1] = 2
          out[#out + 1] = holder
        elseif on_dup == 4 then
          create = false
          out[#out + 1] = item
          out[#out + 1] = 3
          out[#out + 1] = holder
        end
      end
    end
    if create then redis.call('SET', ikey, id, 'PX', pf.ttl) end
  end
  if create then
    local ef, ev
    if EVRUN and EVLKIND == 'enqueued' and EVLDETAIL == nil and EVCOUNT + 1 < EVENT_CHUNK then
      -- rq_event(id, 'enqueued', nil) inlined: its fast path, when the entry does not fill up
      EVN = EVN + 1
      EVCOUNT = EVCOUNT + 1
      EVLEN = EVLEN + 1
      EVBUF[EVLEN] = id
      ev = EVLVALUE
      local last = EVN % 10
      if last == 0 then EVTENS = 'x:' .. string.format('%d', (EVN - last) / 10) end
      ef = EVTENS .. DIGITS[last]
    else
      ef, ev = rq_event(id, 'enqueued', nil)
    end
    if fast then
      rcall('HSET', KEY_PREFIX .. id, 's', 'pending', 'p', payload, 'n', nums, 't', typ, ef, ev)
    elseif pf.plain then
      rcall('HSET', KEY_PREFIX .. id, 's', 'pending', 'p', payload, 'm', pf.m, 'n', nums, 't', typ, ef, ev)
    else
      local args = {'s', pf.status, 'p', payload, 'n', nums, 't', typ, ef, ev}
      if not pf.bare then
        args[#args + 1] = 'm'
        args[#args + 1] = pf.m
      end
      if pf.status == 'scheduled' then
        local sf, sv = rq_event(id, 'scheduled', nil)
        args[#args + 1] = sf
        args[#args + 1] = sv
      end
      if ik then
        args[#args + 1] = 'ik'
        args[#args + 1] = ik
      end
      if pf.parent ~= '' then
        args[#args + 1] = 'pa'
        args[#args + 1] = pf.parent
      end
      rcall('HSET', KEY_PREFIX .. id, unpack(args))
    end
    n = n + 1
    zidx[2 * n - 1] = '0'
    zidx[2 * n] = MEMBER_PREFIX .. id
    if pending then
      if n == 1 then
        rq_make_ready(id, typ, pf.priority, 0, NOW) -- wakes the type and records it in P.."types"
      else
        zready[2 * n - 3] = score
        zready[2 * n - 2] = id
      end
    else
      rq_make_ready(id, typ, pf.priority, 0, pf.ready)
    end
  end
end
if pf then pf.n = n end
-- The index writes of the batch: one variadic ZADD per key and chunk, one counter change per profile.
local function zadd_all(key, args)
  for i = 1, #args, 4000 do redis.call('ZADD', key, unpack(args, i, math.min(i + 3999, #args))) end
end
for i = 1, K do
  local p = profiles[i]
  if p.n > 0 then
    zadd_all(P .. 'st:' .. p.status, p.zidx)
    zadd_all(P .. 'ty:' .. p.typ, p.zidx)
    if p.parent ~= '' then zadd_all(P .. 'kids:' .. p.parent, p.zidx) end
    if #p.zready > 0 then zadd_all(P .. 'ready:' .. p.typ, p.zready) end
    rq_count(p.status, p.typ, p.n)
  end
end
rq_flush()
rq_wake()
return out
