-- runnerq-fast: the worker registry of one queue (one entry per running engine).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."workers" (HASH worker id -> the entry, msgspec JSON of
--   runnerq_fast.models.WorkerInfo) and P.."workers:exp" (ZSET worker id, score = expiry ms on the
--   server's clock). An entry whose expiry has passed belongs to an engine that stopped heartbeating.
-- ARGV[1] = 'register': ARGV[2] worker id, ARGV[3] entry, ARGV[4] time to live (ms); drops the
--             expired entries first. Returns 1.
--           'deregister': ARGV[2] worker id. Returns 1.
--           'list': returns the live entries, ordered by worker id.
local W, X = P .. 'workers', P .. 'workers:exp'
local op = ARGV[1]
if op == 'list' then
  local ids = redis.call('ZRANGE', X, '(' .. NOW, '+inf', 'BYSCORE')
  if #ids == 0 then return {} end
  table.sort(ids)
  return redis.call('HMGET', W, unpack(ids))
end
if op == 'deregister' then
  redis.call('HDEL', W, ARGV[2])
  redis.call('ZREM', X, ARGV[2])
  return 1
end
local gone = redis.call('ZRANGE', X, '-inf', NOW, 'BYSCORE', 'LIMIT', 0, 1000)
for _, id in ipairs(gone) do
  redis.call('HDEL', W, id)
  redis.call('ZREM', X, id)
end
redis.call('HSET', W, ARGV[2], ARGV[3])
redis.call('ZADD', X, NOW + tonumber(ARGV[4]), ARGV[2])
return 1
