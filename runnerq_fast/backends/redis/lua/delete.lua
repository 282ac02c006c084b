-- runnerq-fast: operator delete of finished activities (completed, failed, dead letter, cancelled):
-- the hash (with its events and result), every index entry, its counter and its idempotency key
-- go; a "deleted" event goes to the live stream only.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."st:"..status, P.."ty:"..type,
--   P.."kids:"..parent, P.."counts", P.."fin", P.."dead", P.."events",
--   P.."idem:"..#type..":"..type..":"..key.
-- ARGV: ids.
-- Returns: {deleted ids, number of existing ids in another status}.
local TERMINAL = {completed = true, failed = true, dead_letter = true, cancelled = true}
local changed, skipped = {}, 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'c', 'pa', 'ik')
  if h[1] and TERMINAL[h[1]] then
    local mem = rq_member(h[3], id)
    redis.call('UNLINK', k)
    rq_zrem(P .. 'st:' .. h[1], mem)
    rq_count(h[1], h[2], -1)
    rq_zrem(P .. 'ty:' .. h[2], mem)
    if h[4] then rq_zrem(P .. 'kids:' .. h[4], mem) end
    if h[1] == 'dead_letter' then rq_zrem(P .. 'dead', id) else rq_zrem(P .. 'fin', id) end
    if h[5] then
      local ikey = P .. 'idem:' .. #h[2] .. ':' .. h[2] .. ':' .. h[5]
      if redis.call('GET', ikey) == id then redis.call('DEL', ikey) end
    end
    rq_event(id, 'deleted', nil)
    changed[#changed + 1] = id
  elseif h[1] then
    skipped = skipped + 1
  end
end
rq_flush()
return {changed, skipped}
