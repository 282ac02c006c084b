-- runnerq-fast: requeue activities whose lease expired (counts an attempt), dead-letter the exhausted,
-- cancel the ones an operator asked to cancel (field cr); also forgets the index entries of
-- finished activities whose hash has expired (P.."fin" members older than the result ttl).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."lease", P.."a:"..id, P.."st:"..status, P.."cnt",
--   P.."ct:"..type, P.."ch:"..parent, P.."fin", P.."dl", P.."ready:"..type, P.."types", P.."sched",
--   P.."events", P.."wake"; publishes on P.."done".
-- ARGV: limit, result ttl ms.
-- Returns: {requeued ids, dead-lettered ids, cancelled ids}.
local ttl = ARGV[2]
local limit = tonumber(ARGV[1])
local requeued, dead, cancelled = {}, {}, {}
local woke = false
local expired = redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', NOW, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  rq_zrem(P .. 'lease', id)
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'rc', 'mr', 't', 'pr', 'r', 'c', 'pa', 'cr')
  if h[1] == 'processing' then
    local rc = tonumber(h[2]) + 1
    local created = tonumber(h[7])
    if h[9] then
      rq_finish(id, 'processing', 'cancelled', nil, nil, ttl, h[4], created, h[8], 'lease expired')
      cancelled[#cancelled + 1] = id
    elseif rc > tonumber(h[3]) then
      redis.call('HSET', k, 'rc', rc)
      rq_finish(id, 'processing', 'dead_letter', nil, 'lease expired; retries exhausted', ttl, h[4], created, h[8])
      dead[#dead + 1] = id
    else
      local ef, ev = rq_event(id, 'requeued', 'lease expired')
      redis.call('HSET', k, 's', 'pending', 'e', 'lease expired', 'rc', rc, ef, ev)
      rq_move(id, 'processing', 'pending', h[4], created)
      if rq_make_ready(id, h[4], tonumber(h[5]), rc, tonumber(h[6])) then woke = true end
      requeued[#requeued + 1] = id
    end
  end
end
-- prune: index entries and counts of finished activities whose hash expired (at most `limit` per pass)
local horizon = NOW - tonumber(ttl)
local old = redis.call('ZRANGEBYSCORE', P .. 'fin', '-inf', '(' .. horizon, 'LIMIT', 0, limit)
for _, member in ipairs(old) do
  local id, rest = string.match(member, '^([^\31]*)\31(.*)$')
  local typ, parent = string.match(rest, '^(.*)\31([^\31]*)$')
  local pttl = redis.call('PTTL', P .. 'a:' .. id)
  if pttl == -2 then  -- gone: forget it everywhere
    rq_zrem(P .. 'fin', member)
    for _, s in ipairs({'completed', 'failed', 'cancelled'}) do
      if redis.call('ZREM', P .. 'st:' .. s, id) == 1 then rq_count(s, typ, -1) end
    end
    rq_zrem(P .. 'ct:' .. typ, id)
    if parent ~= '' then rq_zrem(P .. 'ch:' .. parent, id) end
  elseif pttl == -1 then  -- kept for good (it no longer expires): only this entry is stale
    rq_zrem(P .. 'fin', member)
  end  -- else it expires within milliseconds: the next pass prunes it
end
rq_flush()
if woke then rq_wake() end
local finished = {}
for _, id in ipairs(dead) do finished[#finished + 1] = id end
for _, id in ipairs(cancelled) do finished[#finished + 1] = id end
if #finished > 0 then redis.call('PUBLISH', P .. 'done', table.concat(finished, ',')) end
return {requeued, dead, cancelled}
