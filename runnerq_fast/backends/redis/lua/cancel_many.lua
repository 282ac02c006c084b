-- runnerq-fast: operator cancel: pending, scheduled and retrying activities end cancelled at once;
-- a processing one is marked cancel-requested (field "cr", event cancel_requested) and ends
-- cancelled when its engine acks it (the heartbeat reports the request).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."ready:"..type, P.."susp:"..type, P.."sched",
--   P.."st:"..status, P.."counts", P.."fin", P.."finb:"..n, P.."finseq", P.."events"; publishes on P.."done".
-- ARGV: result ttl ms, then ids.
-- Returns: {changed ids, number of existing ids skipped (another status, or already requested)}.
local ttl = ARGV[1]
local changed, done, skipped = {}, {}, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'n', 'cr')
  if h[1] and READY[h[1]] then
    rq_zrem(P .. 'ready:' .. h[2], id)
    rq_zrem(P .. 'susp:' .. h[2], id)
    rq_zrem(P .. 'sched', id)
    rq_finish(id, h[2], rq_mem(h[3], id), h[1], 'cancelled', nil, nil, ttl)
    changed[#changed + 1] = id
    done[#done + 1] = id
  elseif h[1] == 'processing' and not h[4] then
    local ef, ev = rq_event(id, 'cancel_requested', nil)
    redis.call('HSET', k, 'cr', '1', ef, ev)
    changed[#changed + 1] = id
  elseif h[1] then
    skipped = skipped + 1
  end
end
rq_flush()
if #done > 0 then redis.call('PUBLISH', P .. 'done', table.concat(done, ',')) end
return {changed, skipped}
