-- runnerq-fast: operator retry: failed, dead-lettered and cancelled activities back to pending,
-- ready now, retry_count 0 (event retry_requested, detail = old status).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."st:"..status, P.."counts",
--   P.."fin", P.."dead", P.."ready:"..type (P.."susp:"..type for a suspect), P.."types", P.."events",
--   P.."wake", P.."wake:"..type.
-- ARGV: ids.
-- Returns: {changed ids, number of existing ids in another status or corrupt (rq_corrupt)}.
local RETRYABLE = {failed = true, dead_letter = true, cancelled = true}
local changed, skipped = {}, 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'n', 'su')
  local nums = rq_nums(h[3])
  if h[1] and RETRYABLE[h[1]] and not rq_corrupt(nums, {NPR, 'priority'}) then
    local mem = rq_mem(h[3], id)
    local ef, ev = rq_event(id, 'retry_requested', h[1])
    nums[NRC], nums[NR] = 0, NOW
    redis.call('HSET', k, 's', 'pending', 'n', rq_pack(nums), ef, ev)
    redis.call('HDEL', k, 'fa', 'da', 'res', 'k', 'cr')
    if h[1] == 'dead_letter' then rq_zrem(P .. 'dead', id) else rq_zrem(P .. 'fin', id) end
    rq_move(id, h[2], mem, h[1], 'pending')
    rq_make_ready(id, h[2], tonumber(nums[NPR]), 0, NOW, h[4])
    changed[#changed + 1] = id
  elseif h[1] then
    skipped = skipped + 1
  end
end
rq_flush()
if #changed > 0 then rq_wake() end
return {changed, skipped}
