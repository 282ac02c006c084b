-- runnerq-fast: what a worker could claim now, by activity type (read only).
-- KEYS[1] = P = "rq:{<queue>}:"; reads P.."types", P.."ready:"..type (ZCARD), P.."sched" (its due
--   head) and the type field (t) of P.."a:"..id for each due entry of it.
-- ARGV[1]: most due entries of P.."sched" to read (due scheduled and retrying activities the next
--   claim promotes, as it does up to 1000 per call): beyond them the counts are a lower bound.
-- Returns a flat list: type, count, type, count, ... (types with none are left out).
local out, n = {}, {}
for _, typ in ipairs(redis.call('SMEMBERS', P .. 'types')) do
  local c = redis.call('ZCARD', P .. 'ready:' .. typ)
  if c > 0 then n[typ] = c end
end
local cap = tonumber(ARGV[1])
for _, id in ipairs(redis.call('ZRANGE', P .. 'sched', '-inf', NOW, 'BYSCORE', 'LIMIT', 0, cap)) do
  local typ = redis.call('HGET', P .. 'a:' .. id, 't')
  if typ then n[typ] = (n[typ] or 0) + 1 end
end
for typ, c in pairs(n) do
  out[#out + 1] = typ
  out[#out + 1] = c
end
return out
