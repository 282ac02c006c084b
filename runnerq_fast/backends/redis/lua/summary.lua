-- runnerq-fast: one queue at a glance: counts by status, by type and status, and the ready time
-- of the oldest activity a worker could claim now. Read-only.
-- KEYS[1] = P = "rq:{<queue>}:"; reads P.."st:"..status, P.."cnt", P.."types", P.."ready:"..type,
--   P.."sched".
-- ARGV: none.
-- Returns: {8 counts in status order (pending, scheduled, processing, retrying, completed, failed,
--   dead_letter, cancelled), the P.."cnt" hash as a flat field/value list, oldest ready ms or ''}.
-- The oldest ready time costs one probe per (type, priority, retry count) group present: a ready
-- set is ordered by priority, then retry count, then ready time (lua/_score.lua), so the head of
-- each group is its oldest; the scan hops from a head to the start of the next group.
local ALL = {'pending', 'scheduled', 'processing', 'retrying', 'completed', 'failed', 'dead_letter', 'cancelled'}
local counts = {}
for i, s in ipairs(ALL) do counts[i] = redis.call('ZCARD', P .. 'st:' .. s) end
local oldest = nil
for _, typ in ipairs(redis.call('SMEMBERS', P .. 'types')) do
  local key = P .. 'ready:' .. typ
  local from = '-inf'
  while true do
    local head = redis.call('ZRANGE', key, from, '+inf', 'BYSCORE', 'LIMIT', 0, 1)
    if #head == 0 then break end
    local h = redis.call('HMGET', P .. 'a:' .. head[1], 'pr', 'rc', 'r')
    if not h[1] then
      -- a member without its hash (should not happen): step over it
      from = '(' .. redis.call('ZSCORE', key, head[1])
    else
      local pr, rc, ready = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
      if ready <= NOW and (not oldest or ready < oldest) then oldest = ready end
      -- the next group: the same priority with one retry fewer, or the next lower priority
      if rc > 0 and rc <= 65535 then
        from = rq_score(pr, rc - 1, 0)
      elseif pr > 1 then
        from = rq_score(pr - 1, 65535, 0)
      else
        break
      end
      from = string.format('%.17g', from)
    end
  end
end
local due = redis.call('ZRANGE', P .. 'sched', '-inf', NOW, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
if #due > 0 then
  local ready = tonumber(due[2])
  if not oldest or ready < oldest then oldest = ready end
end
return {counts, redis.call('HGETALL', P .. 'cnt'), oldest and tostring(oldest) or ''}
