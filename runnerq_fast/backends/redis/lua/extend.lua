-- runnerq-fast: heartbeat, extend every held lease to now + lease_ms; report held activities
-- whose cancellation an operator requested (field "cr").
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."events".
-- ARGV: lease_ms, then pairs of (id, claim token).
-- Returns: {ids whose claim no longer holds (not extended), held ids with a cancel request}.
local deadline = NOW + tonumber(ARGV[1])
local lost, stop = {}, {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'tk', 'cr')
  if h[1] ~= 'processing' or h[2] ~= ARGV[i + 1] then
    lost[#lost + 1] = id
  else
    rq_zadd(P .. 'lease', deadline, id)
    local ef, ev = rq_event(id, 'lease_extended', tostring(deadline))
    if redis.call('HLEN', k) < EVENTS_PER_ACTIVITY then
      redis.call('HSET', k, 'l', deadline, ef, ev)
    else
      redis.call('HSET', k, 'l', deadline)
    end
    if h[3] then stop[#stop + 1] = id end
  end
end
rq_flush()
return {lost, stop}
