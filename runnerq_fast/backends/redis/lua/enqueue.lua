-- runnerq-fast: enqueue a batch of activities, applying idempotency atomically.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."ready:"..type,
--   P.."types", P.."sched", P.."st:pending", P.."st:scheduled", P.."ty:"..type,
--   P.."kids:"..parent, P.."counts", P.."events", P.."wake", P.."wake:"..type,
--   P.."idem:"..#type..":"..type..":"..key (STRING: holder id, PX = idempotency ttl; once the
--   reaper removed the holder: "<holder id>\31<its final status>", the same ttl).
-- ARGV: 12 per item: id, type, payload, priority, max_retries, timeout_ms, run_at_ms,
--   metadata, idempotency key, on_duplicate (0 = no key), idempotency ttl ms, parent id ("" = none).
-- Returns: 2 per item: outcome (1 created, 2 existing, 3 rejected), activity id.
local REUSABLE = {failed = true, dead_letter = true, cancelled = true}
local NOWTEXT = string.format('%d', NOW)
local out = {}
for b = 0, #ARGV - 1, 12 do
  local id, typ = ARGV[b + 1], ARGV[b + 2]
  local priority = tonumber(ARGV[b + 4])
  local run_at = tonumber(ARGV[b + 7])
  local on_dup = tonumber(ARGV[b + 10])
  local create = true
  if on_dup > 0 then
    local ikey = P .. 'idem:' .. #typ .. ':' .. typ .. ':' .. ARGV[b + 9]
    local holder = redis.call('GET', ikey)
    if holder then
      local hs
      local sep = string.find(holder, '\31', 1, true)
      if sep then -- the reaper removed the holder: "<id>\31<its final status>" until the key expires
        holder, hs = string.sub(holder, 1, sep - 1), string.sub(holder, sep + 1)
      else
        hs = redis.call('HGET', P .. 'a:' .. holder, 's')
      end
      if hs then
        if on_dup == 2 or (on_dup == 3 and not REUSABLE[hs]) then
          create = false
          out[#out + 1] = 2
          out[#out + 1] = holder
        elseif on_dup == 4 then
          create = false
          out[#out + 1] = 3
          out[#out + 1] = holder
        end
      end
    end
    if create then redis.call('SET', ikey, id, 'PX', ARGV[b + 11]) end
  end
  if create then
    local status, ready = 'pending', NOW
    if run_at > NOW then status, ready = 'scheduled', run_at end
    local k = P .. 'a:' .. id
    local ef, ev = rq_event(id, 'enqueued', nil)
    local args = {'t', typ, 'p', ARGV[b + 3], 'pr', priority, 'mr', ARGV[b + 5], 'to', ARGV[b + 6],
      'm', ARGV[b + 8], 'rc', 0, 'c', NOW, 'r', ready, 's', status, ef, ev}
    if status == 'scheduled' then
      local sf, sv = rq_event(id, 'scheduled', nil)
      args[#args + 1] = sf
      args[#args + 1] = sv
    end
    if on_dup > 0 then
      args[#args + 1] = 'ik'
      args[#args + 1] = ARGV[b + 9]
    end
    local parent = ARGV[b + 12]
    if parent ~= '' then
      args[#args + 1] = 'pa'
      args[#args + 1] = parent
    end
    redis.call('HSET', k, unpack(args))
    local mem = rq_member(NOWTEXT, id)
    rq_move(id, typ, mem, nil, status)
    rq_zadd(P .. 'ty:' .. typ, 0, mem)
    if parent ~= '' then rq_zadd(P .. 'kids:' .. parent, 0, mem) end
    rq_make_ready(id, typ, priority, 0, ready)
    out[#out + 1] = 1
    out[#out + 1] = id
  end
end
rq_flush()
rq_wake()
return out
