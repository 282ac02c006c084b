-- runnerq-fast: operator run-now: scheduled and retrying activities become pending, ready now
-- (event run_now, detail = old status).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."sched", P.."ready:"..type, P.."types",
--   P.."st:"..status, P.."counts", P.."events", P.."wake", P.."wake:"..type.
-- ARGV: ids.
-- Returns: {changed ids, number of existing ids in another status or corrupt (rq_corrupt)}.
local changed, skipped = {}, 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'n')
  local nums = rq_nums(h[3])
  if (h[1] == 'scheduled' or h[1] == 'retrying') and not rq_corrupt(nums, {NPR, 'priority', NRC, 'retry_count'}) then
    local ef, ev = rq_event(id, 'run_now', h[1])
    nums[NR] = NOW
    redis.call('HSET', k, 's', 'pending', 'n', rq_pack(nums), ef, ev)
    rq_zrem(P .. 'sched', id)
    rq_move(id, h[2], rq_mem(h[3], id), h[1], 'pending')
    rq_make_ready(id, h[2], tonumber(nums[NPR]), tonumber(nums[NRC]), NOW)
    changed[#changed + 1] = id
  elseif h[1] then
    skipped = skipped + 1
  end
end
rq_flush()
if #changed > 0 then rq_wake() end
return {changed, skipped}
