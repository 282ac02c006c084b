-- runnerq-fast: heartbeat, extend every held lease to now + lease_ms; report held activities
-- whose cancellation an operator requested (field "cr").
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."events".
-- ARGV: lease_ms, then pairs of (id, claim token).
-- Returns: {ids whose claim no longer holds (not extended), held ids with a cancel request}.
local deadline = NOW + tonumber(ARGV[1])
local deadline_text = string.format('%d', deadline)
local lost, stop = {}, {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'k', 'cr')
  local token = ARGV[i + 1]
  -- field k = "<token>\31<started>\31<lease deadline>": the claim holds if it starts with the token
  local held = h[1] == 'processing' and h[2] and string.match(h[2], '^(.*\31)[^\31]*$')
  if not held or string.sub(held, 1, #token + 1) ~= token .. '\31' then
    lost[#lost + 1] = id
  else
    rq_zadd(P .. 'lease', deadline, id)
    local ef, ev = rq_event(id, 'lease_extended', tostring(deadline))
    if redis.call('HLEN', k) < EVENTS_PER_ACTIVITY then
      redis.call('HSET', k, 'k', held .. deadline_text, ef, ev)
    else
      redis.call('HSET', k, 'k', held .. deadline_text)
    end
    if h[3] then stop[#stop + 1] = id end
  end
end
rq_flush()
return {lost, stop}
