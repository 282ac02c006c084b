-- runnerq-fast: requeue activities whose lease expired (counts an attempt), dead-letter the exhausted;
-- also forgets ids of expired results in the terminal status sets.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."lease", P.."a:"..id, P.."st:"..status,
--   P.."ready:"..type, P.."types", P.."sched", P.."events", P.."wake"; publishes on P.."done".
-- ARGV: limit, result ttl ms.
-- Returns: {requeued ids, dead-lettered ids}.
local ttl = ARGV[2]
local requeued, dead = {}, {}
local woke = false
local expired = redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(expired) do
  rq_zrem(P .. 'lease', id)
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'rc', 'mr', 't', 'pr', 'r')
  if h[1] == 'processing' then
    local rc = tonumber(h[2]) + 1
    if rc > tonumber(h[3]) then
      redis.call('HSET', k, 'rc', rc)
      rq_finish(id, 'processing', 'dead_letter', nil, 'lease expired; retries exhausted', ttl)
      dead[#dead + 1] = id
    else
      local ef, ev = rq_event(id, 'requeued', 'lease expired')
      redis.call('HSET', k, 's', 'pending', 'e', 'lease expired', 'rc', rc, ef, ev)
      rq_move(id, 'processing', 'pending')
      if rq_make_ready(id, h[4], tonumber(h[5]), rc, tonumber(h[6])) then woke = true end
      requeued[#requeued + 1] = id
    end
  end
end
local horizon = NOW - tonumber(ttl)
for _, s in ipairs({'completed', 'failed', 'cancelled'}) do
  redis.call('ZREMRANGEBYSCORE', P .. 'st:' .. s, '-inf', '(' .. horizon)
end
rq_flush()
if woke then rq_wake() end
if #dead > 0 then redis.call('PUBLISH', P .. 'done', table.concat(dead, ',')) end
return {requeued, dead}
