-- runnerq-fast: take or renew a named hold of a queue (a lease on a name, e.g. "prune": one
-- pruner per queue): granted when nobody holds it, its time ran out (the key expired), or
-- ARGV[2] holds it already (its time is renewed).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."hold:"..purpose (STRING: holder, expires by PX).
-- ARGV: purpose, holder, ttl (ms).
-- Returns: 1 if ARGV[2] holds it now, else 0.
local k = P .. 'hold:' .. ARGV[1]
local current = redis.call('GET', k)
if current and current ~= ARGV[2] then return 0 end
redis.call('SET', k, ARGV[2], 'PX', ARGV[3])
return 1
