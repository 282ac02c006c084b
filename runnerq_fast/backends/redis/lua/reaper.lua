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
-- Returns: {requeued ids, dead-lettered ids, cancelled ids, expired results dropped}; a corrupt
--   activity (rq_corrupt) is dead-lettered with its reason, alone.
local ttl = ARGV[2]
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
return {requeued, dead, cancelled, dropped}
