-- runnerq-fast: put held activities back to pending without counting an attempt (shutdown);
-- one whose cancellation was requested ends cancelled instead.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."st:"..status,
--   P.."counts", P.."fin", P.."ready:"..type (P.."susp:"..type: a suspect stays one), P.."types",
--   P.."sched", P.."events", P.."wake", P.."wake:"..type;
--   publishes on P.."done".
-- ARGV: result ttl ms, then pairs of (id, claim token).
-- Returns: the ids released (or so cancelled).
local ttl = ARGV[1]
local released, done = {}, {}
local RELEASE_CHECKS = {4, 'priority', 5, 'retry_count', 6, 'ready_at_ms'}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'tk', 't', 'pr', 'rc', 'r', 'c', 'cr', 'su')
  if h[1] == 'processing' and h[2] == ARGV[i + 1] then
    local mem = rq_member(h[7], id)
    rq_zrem(P .. 'lease', id)
    if h[8] then
      rq_finish(id, h[3], mem, 'processing', 'cancelled', nil, nil, ttl, 'released at shutdown')
      done[#done + 1] = id
    elseif rq_corrupt(h, RELEASE_CHECKS) then -- cannot be made ready: dead-lettered with the reason
      rq_finish(id, h[3], mem, 'processing', 'dead_letter', nil, rq_corrupt(h, RELEASE_CHECKS), ttl)
      done[#done + 1] = id
    else
      local ef, ev = rq_event(id, 'requeued', 'released at shutdown')
      redis.call('HSET', k, 's', 'pending', ef, ev)
      rq_move(id, h[3], mem, 'processing', 'pending')
      rq_make_ready(id, h[3], tonumber(h[4]), tonumber(h[5]), tonumber(h[6]), h[9])
    end
    released[#released + 1] = id
  end
end
rq_flush()
rq_wake()
if #done > 0 then redis.call('PUBLISH', P .. 'done', table.concat(done, ',')) end
return released
