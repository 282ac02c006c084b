-- runnerq-fast: cancel an activity that has not started (pending, scheduled, retrying).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."ready:"..type, P.."susp:"..type, P.."sched",
--   P.."st:"..status, P.."counts", P.."fin", P.."finb:"..n, P.."finseq", P.."events"; publishes on P.."done".
-- ARGV: id, result ttl ms.
-- Returns: 1 if cancelled, else 0.
local id = ARGV[1]
local h = redis.call('HMGET', P .. 'a:' .. id, 's', 't', 'n')
if not h[1] or not READY[h[1]] then return 0 end
rq_zrem(P .. 'ready:' .. h[2], id)
rq_zrem(P .. 'susp:' .. h[2], id)
rq_zrem(P .. 'sched', id)
rq_finish(id, h[2], rq_mem(h[3], id), h[1], 'cancelled', nil, nil, ARGV[2])
rq_flush()
redis.call('PUBLISH', P .. 'done', id)
return 1
