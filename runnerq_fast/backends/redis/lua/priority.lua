-- runnerq-fast: operator set-priority of activities that have not started (pending, scheduled,
-- retrying); the ready set is re-scored at once (event priority_changed, detail "old->new").
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."ready:"..type (P.."susp:"..type for a
--   suspect), P.."events".
-- ARGV: new priority (1-4), then ids.
-- Returns: {changed ids, number of existing ids skipped (another status, already at it, corrupt)};
--   an error reply, before any write, for a priority outside 1-4.
local new = tonumber(ARGV[1])
if not new or new ~= math.floor(new) or new < 1 or new > 4 then
  return redis.error_reply('priority must be 1-4, got ' .. tostring(ARGV[1]))
end
local changed, skipped = {}, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 't', 'n', 'su')
  local nums = rq_nums(h[3])
  local old = nums[NPR]
  if h[1] and READY[h[1]] and old and tonumber(old) ~= new
      and not rq_corrupt(nums, {NRC, 'retry_count', NR, 'ready_at_ms'}) then
    local ef, ev = rq_event(id, 'priority_changed', old .. '->' .. new)
    nums[NPR] = new
    redis.call('HSET', k, 'n', rq_pack(nums), ef, ev)
    local ready = P .. (h[4] and 'susp:' or 'ready:') .. h[2]
    if redis.call('ZSCORE', ready, id) then
      rq_zadd(ready, rq_score(new, tonumber(nums[NRC]), tonumber(nums[NR])), id)
    end
    changed[#changed + 1] = id
  elseif h[1] then
    skipped = skipped + 1
  end
end
rq_flush()
return {changed, skipped}
