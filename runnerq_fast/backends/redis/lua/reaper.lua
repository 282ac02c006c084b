-- runnerq-fast: requeue activities whose lease expired, dead-letter the exhausted, cancel those
-- whose cancellation was requested; then remove finished activities whose result ttl passed,
-- with their index entries, counts and idempotency keys (P.."fin", at most ARGV[3] per run). An
-- expiry counts an attempt only against a suspect (field su: claimed alone); any other goes back
-- uncounted, and either way the activity is a suspect from now on (P.."susp:"..type).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."lease", P.."a:"..id, P.."st:"..status,
--   P.."ty:"..type, P.."kids:"..parent, P.."counts", P.."fin", P.."dead", P.."ready:"..type,
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
-- finished activities whose result ttl passed go, with their index entries and counts
local gone = redis.call('ZRANGEBYSCORE', P .. 'fin', '-inf', NOW, 'LIMIT', 0, FIN_BATCH)
for _, id in ipairs(gone) do
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'n', 'pa', 'ik')
  if h[1] == 'completed' or h[1] == 'failed' or h[1] == 'cancelled' then
    rq_forget(id, h[1], h[2], h[3], h[4], h[5], true) -- its idempotency key lives on (idempotency ttl)
  end
  rq_zrem(P .. 'fin', id)
end
rq_flush()
rq_wake()
local finished = {}
for _, id in ipairs(dead) do finished[#finished + 1] = id end
for _, id in ipairs(cancelled) do finished[#finished + 1] = id end
if #finished > 0 then redis.call('PUBLISH', P .. 'done', table.concat(finished, ',')) end
return {requeued, dead, cancelled, #gone}
