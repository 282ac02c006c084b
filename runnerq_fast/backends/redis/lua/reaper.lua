-- runnerq-fast: requeue activities whose lease expired, dead-letter the exhausted, cancel those
-- whose cancellation was requested; then remove finished activities whose result ttl passed,
-- with their index entries, counts and idempotency keys (P.."fin", about ARGV[3] per run). An
-- expiry counts an attempt only against a suspect (field su: claimed alone); any other goes back
-- uncounted, and either way the activity is a suspect from now on (P.."susp:"..type).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."lease", P.."a:"..id, P.."st:"..status,
--   P.."ty:"..type, P.."kids:"..parent, P.."counts", P.."fin", P.."finb:"..n, P.."finseq", P.."dead", P.."ready:"..type,
--   P.."susp:"..type, P.."types", P.."sched", P.."events", P.."wake", P.."wake:"..type,
--   P.."idem:"..#type..":"..type..":"..key (a removed holder's key keeps its ttl and becomes
--   "<id>\31<status>"); publishes on P.."done".
-- ARGV: limit (expired leases), result ttl ms, limit (expired results), the last error of an
--   expiry not counted (runnerq_fast.models.LEASE_EXPIRED_UNCHARGED).
-- Returns: {requeued ids, dead-lettered ids, cancelled ids, expired results dropped, the indexes
--   rq_repair rebuilt ("types", "st", "ty", "counts", "ready", "dead")}; a corrupt
--   activity (rq_corrupt) is dead-lettered with its reason, alone.
-- ARGV[5] (optional) '1': first check the queue's indexes against each other (rq_repair).
local ttl = ARGV[2]

-- Repair after a lost key (evicted under allkeys-lru, deleted): a few counts compared, and a walk of
-- the activities only when two that must agree do not. Each rebuilt index is named in the reply.
-- Invariants: every counted type is in P.."types"; the activities of the ty: indexes are those of the
-- st: indexes and P.."lease"; P.."counts" sums to them; the pending, scheduled and retrying ones are
-- those of the ready, suspect and scheduled sets; P.."dead" holds the st:dead_letter ones.
local NONPROC = {'pending', 'scheduled', 'retrying', 'completed', 'failed', 'dead_letter', 'cancelled'}
local repaired = {}

-- An index entry of activity `id` whose hash is gone: out of every index it may be in, counted off.
local function rq_gone(id, typs)
  for _, t in ipairs(typs) do
    local mem = nil
    local cursor = '0'
    repeat
      local r = redis.call('ZSCAN', P .. 'ty:' .. t, cursor, 'MATCH', '*:' .. id, 'COUNT', 1000)
      cursor = r[1]
      mem = mem or r[2][1]
    until cursor == '0' or mem
    if mem then
      redis.call('ZREM', P .. 'ty:' .. t, mem)
      local st = nil
      for _, s in ipairs(NONPROC) do
        if redis.call('ZREM', P .. 'st:' .. s, mem) == 1 then st = s end
      end
      if redis.call('ZREM', P .. 'lease', id) == 1 then st = 'processing' end
      if st then rq_count(st, t, -1) end
      redis.call('ZREM', P .. 'ready:' .. t, id)
      redis.call('ZREM', P .. 'susp:' .. t, id)
    end
  end
  redis.call('ZREM', P .. 'sched', id)
  redis.call('ZREM', P .. 'dead', id)
end

local function rq_repair()
  local typs = redis.call('SMEMBERS', P .. 'types')
  local known, missing = {}, {}
  for _, t in ipairs(typs) do known[t] = true end
  local counts = redis.call('HGETALL', P .. 'counts')
  local csum = 0
  for i = 1, #counts, 2 do
    local st, t = string.match(counts[i], '^([^\31]*)\31(.*)$')
    local c = tonumber(counts[i + 1]) or 0
    csum = csum + c
    if t and not known[t] then
      known[t] = true
      typs[#typs + 1] = t
      missing[#missing + 1] = t
    end
  end
  if #missing > 0 then
    redis.call('SADD', P .. 'types', unpack(missing))
    repaired[#repaired + 1] = 'types'
  end
  local tysum = 0
  for _, t in ipairs(typs) do tysum = tysum + redis.call('ZCARD', P .. 'ty:' .. t) end
  local stc = {}
  local leases = redis.call('ZCARD', P .. 'lease')
  local stsum = leases
  for _, s in ipairs(NONPROC) do
    stc[s] = redis.call('ZCARD', P .. 'st:' .. s)
    stsum = stsum + stc[s]
  end
  if stsum < tysum then
    -- a status index or the lease set lost: rebuilt from the hashes of the type indexes
    for _, t in ipairs(typs) do
      for _, mem in ipairs(redis.call('ZRANGE', P .. 'ty:' .. t, 0, -1)) do
        local id = string.sub(mem, 17)
        local h = redis.call('HMGET', P .. 'a:' .. id, 's', 'k')
        if h[1] == 'processing' then
          if not redis.call('ZSCORE', P .. 'lease', id) then
            local deadline = h[2] and string.match(h[2], '\31(%d+)$') or NOWS
            redis.call('ZADD', P .. 'lease', deadline, id)
          end
        elseif h[1] then
          redis.call('ZADD', P .. 'st:' .. h[1], 0, mem)
        end
      end
    end
    repaired[#repaired + 1] = 'st'
  elseif tysum < stsum then
    -- a type index lost: rebuilt from the status indexes and the lease set
    local function add(id, mem)
      local h = redis.call('HMGET', P .. 'a:' .. id, 't', 'n')
      if h[1] then
        redis.call('ZADD', P .. 'ty:' .. h[1], 0, mem or rq_mem(h[2], id))
        if not known[h[1]] then known[h[1]] = true; redis.call('SADD', P .. 'types', h[1]) end
      end
    end
    for _, s in ipairs(NONPROC) do
      for _, mem in ipairs(redis.call('ZRANGE', P .. 'st:' .. s, 0, -1)) do add(string.sub(mem, 17), mem) end
    end
    for _, id in ipairs(redis.call('ZRANGE', P .. 'lease', 0, -1)) do add(id, nil) end
    repaired[#repaired + 1] = 'ty'
  elseif csum ~= stsum then
    -- the counters lost: counted again, per type, from the indexes (ZINTERCARD, no hash read)
    redis.call('DEL', P .. 'counts')
    for _, t in ipairs(typs) do
      local left = redis.call('ZCARD', P .. 'ty:' .. t)
      for _, s in ipairs(NONPROC) do
        local c = redis.call('ZINTERCARD', 2, P .. 'ty:' .. t, P .. 'st:' .. s)
        if c > 0 then redis.call('HSET', P .. 'counts', s .. '\31' .. t, c) end
        left = left - c
      end
      if left > 0 then redis.call('HSET', P .. 'counts', 'processing\31' .. t, left) end
    end
    repaired[#repaired + 1] = 'counts'
  end
  -- the ready, suspect and scheduled sets against the pending, scheduled and retrying activities
  local queued = redis.call('ZCARD', P .. 'sched')
  for _, t in ipairs(typs) do
    queued = queued + redis.call('ZCARD', P .. 'ready:' .. t) + redis.call('ZCARD', P .. 'susp:' .. t)
  end
  if queued ~= stc.pending + stc.scheduled + stc.retrying then
    for _, s in ipairs({'pending', 'scheduled', 'retrying'}) do
      for _, mem in ipairs(redis.call('ZRANGE', P .. 'st:' .. s, 0, -1)) do
        local id = string.sub(mem, 17)
        local h = redis.call('HMGET', P .. 'a:' .. id, 's', 't', 'n', 'su')
        if not h[1] then
          rq_gone(id, typs)
          redis.call('ZREM', P .. 'st:' .. s, mem) -- if its type index was lost too (then counted again later)
        elseif h[1] ~= s then
          redis.call('ZREM', P .. 'st:' .. s, mem) -- a stale entry: its status has its own
        elseif not redis.call('ZSCORE', P .. 'sched', id) and not redis.call('ZSCORE', P .. 'ready:' .. h[2], id)
            and not redis.call('ZSCORE', P .. 'susp:' .. h[2], id) then
          local nums = rq_nums(h[3])
          if not rq_corrupt(nums, {NPR, 'priority', NRC, 'retry_count', NR, 'ready_at_ms'}) then
            rq_make_ready(id, h[2], tonumber(nums[NPR]), tonumber(nums[NRC]), tonumber(nums[NR]), h[4])
          end
        end
      end
    end
    local sets = {P .. 'sched'}
    for _, t in ipairs(typs) do sets[#sets + 1] = P .. 'ready:' .. t; sets[#sets + 1] = P .. 'susp:' .. t end
    for _, key in ipairs(sets) do
      for _, id in ipairs(redis.call('ZRANGE', key, 0, -1)) do
        if not READY[redis.call('HGET', P .. 'a:' .. id, 's') or ''] then redis.call('ZREM', key, id) end
      end
    end
    repaired[#repaired + 1] = 'ready'
  end
  if redis.call('ZCARD', P .. 'dead') ~= stc.dead_letter then
    for _, mem in ipairs(redis.call('ZRANGE', P .. 'st:dead_letter', 0, -1)) do
      local id = string.sub(mem, 17)
      local h = redis.call('HMGET', P .. 'a:' .. id, 's', 'da')
      if h[1] == 'dead_letter' and not redis.call('ZSCORE', P .. 'dead', id) then
        redis.call('ZADD', P .. 'dead', tonumber(h[2]) or NOW, id)
      end
    end
    for _, id in ipairs(redis.call('ZRANGE', P .. 'dead', 0, -1)) do
      if redis.call('HGET', P .. 'a:' .. id, 's') ~= 'dead_letter' then redis.call('ZREM', P .. 'dead', id) end
    end
    repaired[#repaired + 1] = 'dead'
  end
  rq_flush()
end
if ARGV[5] == '1' then rq_repair() end
local uncounted = ARGV[4]
local FIN_BATCH = tonumber(ARGV[3])
local requeued, dead, cancelled = {}, {}, {}
local REAP_CHECKS = {NRC, 'retry_count', NMR, 'max_retries', NPR, 'priority', NR, 'ready_at_ms', NC, 'created_at_ms',
  NTO, 'timeout_ms'}
local expired = redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(expired) do
  rq_zrem(P .. 'lease', id)
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'n', 't', 'cr', 'su')
  if not h[1] then rq_gone(id, redis.call('SMEMBERS', P .. 'types')) end -- its hash lost: out of its indexes
  local nums = rq_nums(h[2])
  local bad = h[1] == 'processing' and rq_corrupt(nums, REAP_CHECKS)
  if bad then
    rq_finish(id, h[3] or '', rq_mem_of(h[2], id, h[3] or ''), 'processing', 'dead_letter', nil, bad, ttl)
    dead[#dead + 1] = id
  elseif h[1] == 'processing' then
    local mem = rq_mem(h[2], id)
    local rc = tonumber(nums[NRC])
    if h[5] then rc = rc + 1 end
    nums[NRC] = rc
    if h[4] then
      rq_finish(id, h[3], mem, 'processing', 'cancelled', nil, nil, ttl, 'lease expired')
      cancelled[#cancelled + 1] = id
    elseif h[5] and rc > tonumber(nums[NMR]) then
      nums[NRC] = rc - 1 -- retries taken stay at max_retries, as a handler's last failure leaves them
      redis.call('HSET', k, 'n', rq_pack(nums))
      rq_finish(id, h[3], mem, 'processing', 'dead_letter', nil, 'lease expired; retries exhausted', ttl)
      dead[#dead + 1] = id
    else
      local err = h[5] and 'lease expired' or uncounted
      local ef, ev = rq_event(id, 'requeued', err)
      redis.call('HSET', k, 's', 'pending', 'e', err, 'n', rq_pack(nums), 'su', '1', ef, ev)
      rq_move(id, h[3], mem, 'processing', 'pending')
      rq_make_ready(id, h[3], tonumber(nums[NPR]), rc, tonumber(nums[NR]), true)
      requeued[#requeued + 1] = id
    end
  end
end
-- finished activities whose result ttl passed go, with their index entries and counts: whole
-- batches (P.."finb:"..member), begun while fewer than ARGV[3] were dropped. An id of a batch goes
-- only if it is still finished at the batch's time (a retried and finished again one is in a later one).
local dropped = 0
local function drop(id, finished)
  local h = redis.call('HMGET', P .. 'a:' .. id, 's', 't', 'n', 'pa', 'ik', 'fa')
  if (h[1] == 'completed' or h[1] == 'failed' or h[1] == 'cancelled') and (not finished or h[6] == finished) then
    rq_forget(id, h[1], h[2], h[3], h[4], h[5], true) -- its idempotency key lives on (idempotency ttl)
  elseif not h[1] then
    rq_gone(id, redis.call('SMEMBERS', P .. 'types')) -- its hash lost: out of its indexes
  end
  dropped = dropped + 1
end
local gone = redis.call('ZRANGEBYSCORE', P .. 'fin', '-inf', NOW, 'LIMIT', 0, FIN_BATCH)
for _, member in ipairs(gone) do
  if dropped >= FIN_BATCH then break end
  if string.find(member, '^b%d+$') then
    local key = P .. 'finb:' .. member
    local batch = redis.call('GET', key)
    if batch then
      local sep = string.find(batch, '\31', 1, true)
      local finished = string.sub(batch, 1, sep - 1)
      for id in string.gmatch(string.sub(batch, sep + 1), '[^,]+') do drop(id, finished) end
    end
    redis.call('DEL', key)
  else
    drop(member, nil) -- one id (written before the batches)
  end
  rq_zrem(P .. 'fin', member)
end
rq_flush()
rq_wake()
local finished = {}
for _, id in ipairs(dead) do finished[#finished + 1] = id end
for _, id in ipairs(cancelled) do finished[#finished + 1] = id end
if #finished > 0 then redis.call('PUBLISH', P .. 'done', table.concat(finished, ',')) end
return {requeued, dead, cancelled, dropped, repaired}
