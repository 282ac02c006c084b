-- runnerq-fast: an operator action on a list of activities of one queue, each guarded by its status.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."st:"..status, P.."cnt", P.."ct:"..type,
--   P.."ch:"..parent, P.."fin", P.."dl", P.."ready:"..type, P.."types", P.."sched", P.."lease",
--   P.."idem:"..#type..":"..type..":"..key, P.."events", P.."wake"; publishes on P.."done".
-- ARGV: action, result ttl ms, new priority (set_priority; else 0), then the ids.
--   retry         failed, dead_letter, cancelled -> pending, ready now, retry count 0 (event retry_requested,
--                 detail: the old status); the hash no longer expires
--   cancel        pending, scheduled, retrying -> cancelled (event cancelled); processing without a request
--                 -> field cr = now (event cancel_requested): the engine stops it after its next heartbeat
--   run_now       scheduled, retrying -> pending, ready now (event run_now, detail: the old status)
--   set_priority  pending, scheduled, retrying at another priority -> the new one, re-scored in its ready
--                 set (event priority_changed, detail "old->new")
--   delete        completed, failed, dead_letter, cancelled: the hash (with its events), every index
--                 entry, the idempotency key if it still names it (event deleted, on the stream only)
-- Returns: the ids changed.
local action, ttl, priority = ARGV[1], ARGV[2], tonumber(ARGV[3])
local FINISHED = {completed = true, failed = true, dead_letter = true, cancelled = true}
local RETRYABLE = {failed = true, dead_letter = true, cancelled = true}
local changed, done = {}, {}
local woke = false
for i = 4, #ARGV do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'pr', 'rc', 'r', 'c', 'pa', 'cr', 'ik')
  local s, typ, created = h[1], h[2], tonumber(h[6])
  if not s then
    -- not an activity of this queue (or expired): nothing to do
  elseif action == 'retry' and RETRYABLE[s] then
    local ef, ev = rq_event(id, 'retry_requested', s)
    redis.call('HSET', k, 's', 'pending', 'rc', 0, 'r', NOW, ef, ev)
    redis.call('HDEL', k, 'fa', 'da', 'res', 'cr', 'tk', 'l')
    redis.call('PERSIST', k)
    if s == 'dead_letter' then rq_zrem(P .. 'dl', id) else rq_zrem(P .. 'fin', rq_fin_member(id, typ, h[7])) end
    rq_move(id, s, 'pending', typ, created)
    if rq_make_ready(id, typ, tonumber(h[3]), 0, NOW) then woke = true end
    changed[#changed + 1] = id
  elseif action == 'cancel' and READY[s] then
    rq_zrem(P .. 'ready:' .. typ, id)
    rq_zrem(P .. 'sched', id)
    rq_finish(id, s, 'cancelled', nil, nil, ttl, typ, created, h[7])
    done[#done + 1] = id
    changed[#changed + 1] = id
  elseif action == 'cancel' and s == 'processing' and not h[8] then
    local ef, ev = rq_event(id, 'cancel_requested', nil)
    redis.call('HSET', k, 'cr', NOW, ef, ev)
    changed[#changed + 1] = id
  elseif action == 'run_now' and (s == 'scheduled' or s == 'retrying') then
    local ef, ev = rq_event(id, 'run_now', s)
    redis.call('HSET', k, 's', 'pending', 'r', NOW, ef, ev)
    rq_zrem(P .. 'sched', id)
    rq_move(id, s, 'pending', typ, created)
    if rq_make_ready(id, typ, tonumber(h[3]), tonumber(h[4]), NOW) then woke = true end
    changed[#changed + 1] = id
  elseif action == 'set_priority' and READY[s] and tonumber(h[3]) ~= priority then
    local ef, ev = rq_event(id, 'priority_changed', h[3] .. '->' .. priority)
    redis.call('HSET', k, 'pr', priority, ef, ev)
    -- in its ready set (due, or promoted) it is re-scored; a scheduled one is scored when promoted
    if redis.call('ZSCORE', P .. 'ready:' .. typ, id) then
      rq_zadd(P .. 'ready:' .. typ, rq_score(priority, tonumber(h[4]), tonumber(h[5])), id)
      woke = true
    end
    changed[#changed + 1] = id
  elseif action == 'delete' and FINISHED[s] then
    redis.call('DEL', k)
    rq_zrem(P .. 'st:' .. s, id)
    rq_count(s, typ, -1)
    rq_zrem(P .. 'ct:' .. typ, id)
    if h[7] then rq_zrem(P .. 'ch:' .. h[7], id) end
    if s == 'dead_letter' then rq_zrem(P .. 'dl', id) else rq_zrem(P .. 'fin', rq_fin_member(id, typ, h[7])) end
    if h[9] then
      local ikey = P .. 'idem:' .. #typ .. ':' .. typ .. ':' .. h[9]
      if redis.call('GET', ikey) == id then redis.call('DEL', ikey) end
    end
    rq_event(id, 'deleted', nil)  -- on the stream only: the hash that would keep it is gone
    changed[#changed + 1] = id
  end
end
rq_flush()
if woke then rq_wake() end
if #done > 0 then redis.call('PUBLISH', P .. 'done', table.concat(done, ',')) end
return changed
