-- runnerq-fast Redis helper: shared state helpers (prepended after _score.lua).
-- KEYS[1] = P = "rq:{<queue>}:" -- the prefix of every key of one queue (one hash tag):
--   P.."a:"..id        HASH   one activity (fields below)
--   P.."ev:"..id       LIST   its events, oldest first: "<stream id>\31<kind>\31<at ms>[\31<detail>]"
--   P.."ready:"..type  ZSET   ready activities of one type, scored by rq_score
--   P.."types"         SET    activity types that ever had a ready set
--   P.."sched"         ZSET   not-yet-due activities, scored by ready time (ms)
--   P.."lease"         ZSET   processing activities, scored by lease deadline (ms)
--   P.."st:"..status   ZSET   ids per status, scored by the time of the last transition (ms)
--   P.."events"        STREAM live events of the queue (capped, approximate MAXLEN)
--   P.."wake"          LIST   wake tokens for blocked fetchers (capped)
--   P.."done"          pub/sub channel: comma-separated ids that reached a terminal status
-- Activity hash fields: t type, p payload, m metadata, pr priority, mr max_retries,
--   to timeout_ms, ik idempotency key, rc retry_count, c created ms, r ready ms,
--   s status, tk claim token, l lease deadline ms, sa started ms, fa finished ms,
--   da dead-lettered ms, e last error, res result.
local P = KEYS[1]
local TIME = redis.call('TIME')
local NOW = tonumber(TIME[1]) * 1000 + math.floor(tonumber(TIME[2]) / 1000)
local STREAM_MAXLEN = 100000
local EVENTS_PER_ACTIVITY = 1000
local WAKE_TOKENS = 16
local READY = {pending = true, scheduled = true, retrying = true}

local function rq_emit(id, kind, detail)
  local sid
  if detail then
    sid = redis.call('XADD', P .. 'events', 'MAXLEN', '~', STREAM_MAXLEN, '*', 'a', id, 't', kind, 'at', NOW, 'd', detail)
    redis.call('RPUSH', P .. 'ev:' .. id, sid .. '\31' .. kind .. '\31' .. NOW .. '\31' .. detail)
  else
    sid = redis.call('XADD', P .. 'events', 'MAXLEN', '~', STREAM_MAXLEN, '*', 'a', id, 't', kind, 'at', NOW)
    redis.call('RPUSH', P .. 'ev:' .. id, sid .. '\31' .. kind .. '\31' .. NOW)
  end
end

local function rq_move(id, old, new)
  if old then redis.call('ZREM', P .. 'st:' .. old, id) end
  redis.call('ZADD', P .. 'st:' .. new, NOW, id)
end

-- Put a non-terminal activity where a claim finds it; returns true if it is ready now.
local function rq_make_ready(id, typ, priority, retry_count, ready_ms)
  if ready_ms > NOW then
    redis.call('ZADD', P .. 'sched', ready_ms, id)
    return false
  end
  redis.call('ZADD', P .. 'ready:' .. typ, rq_score(priority, retry_count, ready_ms), id)
  redis.call('SADD', P .. 'types', typ)
  return true
end

local function rq_wake()
  redis.call('LPUSH', P .. 'wake', '1')
  redis.call('LTRIM', P .. 'wake', 0, WAKE_TOKENS - 1)
end

-- Terminal transition from status `old`; results expire after ttl_ms except dead letters.
local function rq_finish(id, old, status, result, err, ttl_ms)
  local k = P .. 'a:' .. id
  redis.call('HSET', k, 's', status, 'fa', NOW)
  redis.call('HDEL', k, 'tk', 'l')
  if result then redis.call('HSET', k, 'res', result) end
  if err then redis.call('HSET', k, 'e', err) end
  if status == 'dead_letter' then redis.call('HSET', k, 'da', NOW) end
  rq_move(id, old, status)
  rq_emit(id, status, err)
  if status ~= 'dead_letter' then
    redis.call('PEXPIRE', k, ttl_ms)
    redis.call('PEXPIRE', P .. 'ev:' .. id, ttl_ms)
  end
end
