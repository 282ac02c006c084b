-- runnerq-fast: one queue at a glance (read only): activities by status, by (status, type), and
-- the ready time of the oldest activity a worker could claim now.
-- KEYS[1] = P = "rq:{<queue>}:"; reads P.."st:"..status, P.."lease", P.."counts", P.."sched", P.."types",
--   P.."ready:"..type.
-- ARGV: the statuses, in the order wanted.
-- Returns: {ZCARD per status, HGETALL of P.."counts", oldest ready ms or -1}.
-- The oldest ready time: the head of P.."sched" if due, and for every ready set the head of every
-- (priority, retry count) band present (a ready set is ordered by priority, then retries, then
-- ready time: rq_score), reached by jumping from band to band.
local cards = {}
for i = 1, #ARGV do
  local key = P .. 'st:' .. ARGV[i]
  if ARGV[i] == 'processing' then key = P .. 'lease' end
  cards[i] = redis.call('ZCARD', key)
end
local best = nil
local head = redis.call('ZRANGE', P .. 'sched', 0, 0, 'WITHSCORES')
if head[1] and tonumber(head[2]) <= NOW then best = tonumber(head[2]) end
for _, typ in ipairs(redis.call('SMEMBERS', P .. 'types')) do
  local key = P .. 'ready:' .. typ
  if redis.call('ZCARD', key) > 0 then
    for pr = 4, 1, -1 do
      local top = rq_score(pr, 0, 17592186044415)
      local from = rq_score(pr, 65535, 0)
      for _ = 1, 256 do
        local e = redis.call('ZRANGE', key, from, top, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
        if not e[1] then break end
        local hi, lo = struct.unpack('>I4I4', struct.pack('>d', tonumber(e[2])))
        local rc = 65535 - (math.floor(hi / 4096) % 65536)
        local ready = (hi % 4096) * 4294967296 + lo
        if not best or ready < best then best = ready end
        if rc <= 0 then break end
        from = rq_score(pr, rc - 1, 0)
      end
    end
  end
end
return {cards, redis.call('HGETALL', P .. 'counts'), best or -1}
