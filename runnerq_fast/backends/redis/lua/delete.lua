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
  local h = redis.call('HMGET', k, 's', 't', 'n', 'pa', 'ik')
  if h[1] and TERMINAL[h[1]] then
    rq_forget(id, h[1], h[2], h[3], h[4], h[5])
    rq_event(id, 'deleted', nil)
    changed[#changed + 1] = id
  elseif h[1] then
    skipped = skipped + 1
  end
end
rq_flush()
return {changed, skipped}
