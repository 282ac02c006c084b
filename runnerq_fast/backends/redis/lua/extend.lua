-- runnerq-fast: heartbeat, extend every held lease to now + lease_ms.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."events".
-- ARGV: lease_ms, then pairs of (id, claim token).
-- Returns: {the ids whose claim no longer holds (not extended), the held ids an operator
--   asked to cancel (field cr; extended)}.
local deadline = NOW + tonumber(ARGV[1])
local lost, stop = {}, {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'tk', 'cr')
  if h[1] ~= 'processing' or h[2] ~= ARGV[i + 1] then
    lost[#lost + 1] = id
  else
    if h[3] then stop[#stop + 1] = id end
    rq_zadd(P .. 'lease', deadline, id)
    local ef, ev = rq_event(id, 'lease_extended', tostring(deadline))
    if redis.call('HLEN', k) < EVENTS_PER_ACTIVITY then
      redis.call('HSET', k, 'l', deadline, ef, ev)
    else
      redis.call('HSET', k, 'l', deadline)
    end
  end
end
rq_flush()
return {lost, stop}
