-- runnerq-fast: store the progress of held activities (ctx.set_progress, coalesced by the engine).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."events".
-- ARGV: triples of (id, claim token, progress JSON text).
-- Writes field "pg" of each activity whose claim holds, with a progress event (detail: the value).
-- Returns: the ids whose claim no longer holds (nothing written for them).
local lost = {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  local k = P .. 'a:' .. id
  local h = redis.call('HMGET', k, 's', 'k')
  local token = ARGV[i + 1]
  -- field k = "<token>\31<started>\31<lease deadline>": the claim holds if it starts with the token
  if h[1] ~= 'processing' or not h[2] or string.sub(h[2], 1, #token + 1) ~= token .. '\31' then
    lost[#lost + 1] = id
  else
    local value = ARGV[i + 2]
    local ef, ev = rq_event(id, 'progress', value)
    if redis.call('HLEN', k) < EVENTS_PER_ACTIVITY then
      redis.call('HSET', k, 'pg', value, ef, ev)
    else
      redis.call('HSET', k, 'pg', value)
    end
  end
end
rq_flush()
return lost
