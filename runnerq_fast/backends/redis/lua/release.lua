-- runnerq-fast: put held activities back to pending without counting an attempt (shutdown).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."st:"..status,
--   P.."ready:"..type, P.."types", P.."sched", P.."events", P.."wake".
-- ARGV: pairs of (id, claim token).
-- Returns: the ids released.
local released = {}
local woke = false
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'tk', 't', 'pr', 'rc', 'r')
  if h[1] == 'processing' and h[2] == ARGV[i + 1] then
    local ef, ev = rq_event(id, 'requeued', 'released at shutdown')
    redis.call('HSET', k, 's', 'pending', ef, ev)
    rq_zrem(P .. 'lease', id)
    rq_move(id, 'processing', 'pending')
    if rq_make_ready(id, h[3], tonumber(h[4]), tonumber(h[5]), tonumber(h[6])) then woke = true end
    released[#released + 1] = id
  end
end
rq_flush()
if woke then rq_wake() end
return released
