-- runnerq-fast: apply finished attempts (completed, retry, failed, dead letter, cancelled), each
-- guarded by its claim. A retry of an activity whose cancellation was requested ends it cancelled.
-- An accepted ack removes the suspect mark (field su).
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id, P.."lease", P.."st:"..status,
--   P.."counts", P.."fin", P.."finb:"..n, P.."finseq", P.."dead", P.."ready:"..type, P.."types", P.."sched", P.."events",
--   P.."wake", P.."wake:"..type; publishes on P.."done".
-- ARGV: result ttl ms, C, then the C plain completions (completed with no error) in runs of
--   consecutive ones with the same claim token and the same kind: the token, then the run's length
--   r and id and result r times (completions with a result), or -r and r ids (completions without
--   one: a handler that returned None, the usual no-op); a claim token is sent once per run, not
--   per ack; then 7 per other ack: id, claim token, outcome
--   (1 completed, 2 retry, 3 failed, 4 dead letter, 5 cancelled), result, error, retry_at_ms,
--   flags (1 = has result, 2 = has error, 4 = has traceback: the error field is then the error, a NUL
--   and the traceback, kept in field tb of the accepted ack's hash and, for a retrying, failed or
--   dead_letter event, in field "xt:<event id>" beside the event's "x:<event id>").
-- Returns: the ids whose claim no longer holds (ack rejected).
local ARGV = ARGV -- a local: read twice per plain completion
local ttl = ARGV[1]
local rejected, done = {}, {}
-- a retry reads one field more (h[6] = cr); the other outcomes do not need it (a hash field
-- lookup scans the hash, and a missing field such as cr scans all of it)
local ACK_CHECKS = {NPR, 'priority', NRC, 'retry_count'}
local nd = 0 -- #done
local LEASE = P .. 'lease'
local KEY_PREFIX = P .. 'a:'
-- Whether a claim token holds an activity whose field k is `k` (k starts with token .. '\31'), by
-- token, then by k: the acks of a batch share their claims' k (one value per claim call), so the
-- prefix is compared once per (token, k), not cut out of k again for every ack.
local GUARDS = {}
local function rq_holds(token, k)
  local seen = GUARDS[token]
  if not seen then seen = {}; GUARDS[token] = seen end
  local ok = seen[k]
  if ok == nil then
    ok = string.sub(k, 1, #token + 1) == token .. '\31'
    seen[k] = ok
  end
  return ok
end

-- The plain completions: rq_finish unrolled (the usual ack of a drain); their counter changes
-- are summed per type.
local plain = tonumber(ARGV[2])
local completed = rq_st('completed')
local finscore = string.format('%d', NOW + tonumber(ttl))
local per_type = {}
local ctyp, cn = nil, 0 -- the type of the last completions and their number, not yet in per_type
local released, indexed, m = {}, {}, 0 -- lease removals, st:completed arguments
local first, left = 3, plain -- first: the next run (then the first of the other acks); left: plain acks not read
while left > 0 do
  local token, r = ARGV[first], tonumber(ARGV[first + 1])
  local width = 2 -- id and result; 1: ids alone (r < 0, completions without a result)
  if r < 0 then r, width = -r, 1 end
  local seen = GUARDS[token]
  if not seen then seen = {}; GUARDS[token] = seen end
  for b = first + 2, first + 1 + width * r, width do
    local id = ARGV[b]
    local k = KEY_PREFIX .. id
    local h = rcall('HMGET', k, 's', 'k', 't', 'n', 'su')
    local kv = h[2]
    local ok = kv and seen[kv] -- rq_holds(token, kv) inlined
    if ok == nil then ok = rq_holds(token, kv) end
    if h[1] ~= 'processing' or not ok then
      rejected[#rejected + 1] = id
    else
      if h[5] then redis.call('HDEL', k, 'su') end
      local ef, ev
      if EVRUN and EVLKIND == 'completed' and EVLDETAIL == nil and EVCOUNT + 1 < EVENT_CHUNK then
        -- rq_event(id, 'completed', nil) inlined: its fast path, when the entry does not fill up
        EVN = EVN + 1
        EVCOUNT = EVCOUNT + 1
        EVLEN = EVLEN + 1
        EVBUF[EVLEN] = id
        ev = EVLVALUE
        local last = EVN % 10
        if last == 0 then EVTENS = 'x:' .. string.format('%d', (EVN - last) / 10) end
        ef = EVTENS .. DIGITS[last]
      else
        ef, ev = rq_event(id, 'completed', nil)
      end
      if width == 2 then
        rcall('HSET', k, 's', 'completed', 'fa', NOWS, ef, ev, 'res', ARGV[b + 1])
      else
        rcall('HSET', k, 's', 'completed', 'fa', NOWS, ef, ev)
      end
      m = m + 1
      released[m] = id
      indexed[2 * m - 1] = '0'
      local n = h[4] -- rq_mem(n, id) inlined
      local head = n and NHEADS[n]
      if head == nil and n then head = rq_nhead(n) end
      indexed[2 * m] = head and head .. id or rq_mem(n, id)
      local typ = h[3]
      if typ ~= ctyp then
        if ctyp ~= nil then per_type[ctyp] = (per_type[ctyp] or 0) + cn end
        ctyp, cn = typ, 0
      end
      cn = cn + 1
    end
  end
  first = first + 2 + width * r
  left = left - r
end
if ctyp ~= nil then per_type[ctyp] = (per_type[ctyp] or 0) + cn end
-- the completed go to P.."fin" as rq_fin would record them, in order (nothing was recorded before),
-- and are the first ids published on P.."done" (the same list when no other ack follows)
if m > 0 then FINS[finscore] = released end
if first > #ARGV then
  done = released
else
  for i = 1, m do done[i] = released[i] end
end
nd = m
for typ, n in pairs(per_type) do
  rq_count('processing', typ, -n)
  rq_count('completed', typ, n)
end
for j = 1, m, CHUNK do redis.call('ZREM', LEASE, unpack(released, j, math.min(j + CHUNK - 1, m))) end
for j = 1, 2 * m, CHUNK do redis.call('ZADD', completed, unpack(indexed, j, math.min(j + CHUNK - 1, 2 * m))) end

for b = first - 1, #ARGV - 1, 7 do
  local id, token, outcome = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
  local flags = tonumber(ARGV[b + 7])
  local result, err, tb = nil, nil, nil
  if flags >= 4 then -- a failed attempt's traceback, after the error and a NUL
    local text = ARGV[b + 5]
    local cut = string.find(text, '\0', 1, true)
    tb = string.sub(text, cut + 1)
    if flags % 4 >= 2 then err = string.sub(text, 1, cut - 1) end
  elseif flags >= 2 then
    err = ARGV[b + 5]
  end
  if flags % 2 == 1 then result = ARGV[b + 4] end
  local k = KEY_PREFIX .. id
  local h
  if outcome == 2 then
    h = redis.call('HMGET', k, 's', 'k', 't', 'n', 'su', 'cr')
  else
    h = redis.call('HMGET', k, 's', 'k', 't', 'n', 'su')
  end
  if h[1] ~= 'processing' or not h[2] or not rq_holds(token, h[2]) then
    rejected[#rejected + 1] = id
  else
    rq_zrem(LEASE, id)
    if h[5] then redis.call('HDEL', k, 'su') end
    local mem = rq_mem(h[4], id)
    local nums = outcome == 2 and rq_nums(h[4])
    if outcome == 5 or (outcome == 2 and h[6]) then
      rq_finish(id, h[3], mem, 'processing', 'cancelled', nil, nil, ttl)
      if tb then redis.call('HSET', k, 'tb', tb) end
      nd = nd + 1
      done[nd] = id
    elseif outcome == 2 and rq_corrupt(nums, ACK_CHECKS) then -- cannot be retried: dead-lettered with the reason
      local ef = rq_finish(id, h[3], mem, 'processing', 'dead_letter', nil, rq_corrupt(nums, ACK_CHECKS), ttl)
      if tb then redis.call('HSET', k, 'tb', tb, 'xt' .. string.sub(ef, 2), tb) end
      nd = nd + 1
      done[nd] = id
    elseif outcome == 2 then
      local rc = tonumber(nums[NRC]) + 1
      local ready = math.max(tonumber(ARGV[b + 6]), NOW)
      nums[NRC], nums[NR] = rc, ready
      local ef, ev = rq_event(id, 'retrying', err)
      local args = {'s', 'retrying', 'n', rq_pack(nums), ef, ev}
      if err then
        args[#args + 1] = 'e'
        args[#args + 1] = err
      end
      if tb then
        args[#args + 1] = 'tb'
        args[#args + 1] = tb
        args[#args + 1] = 'xt' .. string.sub(ef, 2) -- "x:<id>" -> "xt:<id>"
        args[#args + 1] = tb
      end
      redis.call('HSET', k, unpack(args))
      rq_move(id, h[3], mem, 'processing', 'retrying')
      rq_make_ready(id, h[3], tonumber(nums[NPR]), rc, ready)
    else
      local status = 'completed'
      if outcome == 3 then status = 'failed' elseif outcome == 4 then status = 'dead_letter' end
      if outcome ~= 1 then result = nil end
      local ef = rq_finish(id, h[3], mem, 'processing', status, result, err, ttl)
      if tb then
        if outcome == 1 then
          redis.call('HSET', k, 'tb', tb)
        else
          redis.call('HSET', k, 'tb', tb, 'xt' .. string.sub(ef, 2), tb)
        end
      end
      nd = nd + 1
      done[nd] = id
    end
  end
end
rq_flush()
rq_wake()
if nd > 0 then redis.call('PUBLISH', P .. 'done', rq_joined(done, nd)) end
return rejected
