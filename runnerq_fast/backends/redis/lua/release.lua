-- runnerq-fast: put held activities back to pending without counting an attempt (shutdown);
-- one whose cancellation was requested ends cancelled instead.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."st:"..status,
--   P.."counts", P.."fin", P.."finb:"..n, P.."finseq", P.."ready:"..type (P.."susp:"..type: a suspect stays one), P.."types",
--   P.."sched", P.."events", P.."wake", P.."wake:"..type;
--   publishes on P.."done".
-- ARGV: result ttl ms, then pairs of (id, claim token).
-- Returns: the ids released (or so cancelled).
local ttl = ARGV[1]
local released, done = {}, {}
local RELEASE_CHECKS = {NPR, 'priority', NRC, 'retry_count', NR, 'ready_at_ms'}
local GUARDS = {} -- claim token -> token .. '\31', how the field k of an activity it holds starts
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'k', 't', 'n', 'cr', 'su')
  local token = ARGV[i + 1]
  local guard = GUARDS[token]
  if not guard then guard = token .. '\31'; GUARDS[token] = guard end
  if h[1] == 'processing' and h[2] and string.sub(h[2], 1, #guard) == guard then
    local mem = rq_mem(h[4], id)
    local nums = rq_nums(h[4])
    rq_zrem(P .. 'lease', id)
    if h[5] then
      rq_finish(id, h[3], mem, 'processing', 'cancelled', nil, nil, ttl, 'released at shutdown')
      done[#done + 1] = id
    elseif rq_corrupt(nums, RELEASE_CHECKS) then -- cannot be made ready: dead-lettered with the reason
      rq_finish(id, h[3], mem, 'processing', 'dead_letter', nil, rq_corrupt(nums, RELEASE_CHECKS), ttl)
      done[#done + 1] = id
    else
      local ef, ev = rq_event(id, 'requeued', 'released at shutdown')
      redis.call('HSET', k, 's', 'pending', ef, ev)
      rq_move(id, h[3], mem, 'processing', 'pending')
      rq_make_ready(id, h[3], tonumber(nums[NPR]), tonumber(nums[NRC]), tonumber(nums[NR]), h[6])
    end
    released[#released + 1] = id
  end
end
rq_flush()
rq_wake()
if #done > 0 then redis.call('PUBLISH', P .. 'done', table.concat(done, ',')) end
return released
