-- runnerq-fast Redis helper: shared state helpers (prepended after _score.lua).
-- KEYS[1] = P = "rq:{<queue>}:" -- the prefix of every key of one queue (one hash tag):
--   P.."a:"..id        HASH   one activity (fields below)
--   P.."ready:"..type  ZSET   ready activities of one type, scored by rq_score
--   P.."susp:"..type   ZSET   ready suspect activities of one type (field su), same scores: only a
--                             claim of one (claim.lua with ARGV[5] "susp:") takes them
--   P.."types"         SET    activity types that ever had a ready set
--   P.."sched"         ZSET   not-yet-due activities, scored by ready time (ms)
--   P.."lease"         ZSET   processing activities, scored by lease deadline (ms)
--   P.."st:"..status   ZSET   ids per status but processing (that is P.."lease"), all scores 0,
--                             member rq_member(created, id) (lex order)
--   P.."ty:"..type     ZSET   every activity of one type, same members (lex order)
--   P.."kids:"..parent ZSET   the activities enqueued by one activity, same members (lex order)
--   P.."fin"           ZSET   the finished activities the reaper removes (completed, failed, cancelled),
--                             scored by the time they expire (finished ms + result ttl ms): one member
--                             "b<n>" per script and expiry time (rq_fin), whose ids are in
--                             P.."finb:b<n>"; a member written before these batches is one id
--   P.."finb:b"..n     STRING one batch of P.."fin": "<finished ms>\31<id>,<id>,..."
--   P.."finseq"        STRING the last batch number n (lost: after the highest of P.."fin", rq_finseq_lost)
--   P.."dead"          ZSET   dead-lettered ids, scored by dead-letter time (ms)
--   P.."counts"        HASH   "<status>\31<type>" -> number of activities
--   P.."events"        STREAM live events of the queue, one entry per script (capped, approximate MAXLEN)
--   P.."evseq"         STRING last event id of the queue (lost: the stream's last id, or with the stream
--                             the clock in microseconds: rq_evseq_lost)
--   P.."wake"          LIST   wake tokens for blocked fetchers of every type (capped)
--   P.."wake:"..type   LIST   wake tokens for blocked fetchers of one type (capped)
--   P.."done"          pub/sub channel: comma-separated ids that reached a terminal status
-- Activity hash fields (in the order an enqueue writes them: the claim reads the first four):
--   s status, p payload, m metadata (none when it is {}: a hash without m has metadata {}),
--   n the numbers, "<created ms, 15 digits>:<ready ms>\31<priority>\31<retry_count>\31<max_retries>\31<timeout_ms>"
--     (rq_nums splits it; its first 16 bytes are the prefix of the activity's index member),
--   t type, ik idempotency key, pa parent id,
--   k the claim, "<claim token>\31<started ms>\31<lease deadline ms>" (written by a claim, kept after it),
--   fa finished ms, da dead-lettered ms, e last error, res result, cr cancel requested ("1"),
--   tb the traceback of the last attempt whose handler raised (ack.lua writes it),
--   "xt:<stream id>" that attempt's traceback beside its event "x:<stream id>" (retrying, failed or
--   dead_letter; ack.lua writes it for each failed attempt; it goes with the hash),
--   su suspect ("1": its lease expired while claimed beside others, uncounted; an ack removes it),
--   pg the last progress a handler reported (JSON text; progress.lua, under the claim; kept after it),
--   and one field per event:
--   "x:<stream id>" = "<kind>[\31<detail>]" (at most EVENTS_PER_ACTIVITY; then only the stream).
-- (Until this layout the numbers and the claim were fields of their own: pr, rc, mr, to, c, r and
-- tk, sa, l. A store written before it is drained before upgrading: see the README.)
-- The st:, ty:, kids: and counts indexes change in the same script as the status, so they never
-- drift; the reaper removes expired finished activities with their entries (P.."fin").
local P = KEYS[1]
local rcall = redis.call -- a local: the hot loops call it twice per activity (no global and field lookup)
local TIME = redis.call('TIME')
local NOW = tonumber(TIME[1]) * 1000 + math.floor(tonumber(TIME[2]) / 1000)
-- NOW as text, formatted once: Lua formats a number with sprintf("%.14g") every time it is
-- concatenated or passed to redis.call, which was a tenth of a claim's server time.
local NOWS = tostring(NOW)
local STREAM_MAXLEN = 10000
local EVENTS_PER_ACTIVITY = 1000
local WAKE_TOKENS = 16
local READY = {pending = true, scheduled = true, retrying = true}

-- Events: every event gets the next number of the queue's counter P.."evseq" (read once per
-- script, by its first event: rq_evseq). The caller writes the returned (field, value) pair into
-- the activity hash in the same HSET as the transition: field "x:<event id>", value "<kind>\31<at ms>[\31<detail>]".
-- The queue's stream gets ONE entry per script (per EVENT_CHUNK events) with the explicit id
-- "0-<last event id in it>" and fields: at (ms), n (events in it), e = one record per event,
-- "<kind>\31<activity id>\31<detail ref>\30", and "d<ref>" = a detail, each distinct detail of the
-- entry once (ref "" = no detail); event i of the entry has id <last> - n + i. (Entries written
-- before this layout have fields "<i>" = "<kind>\31<activity id>" and "d<i>" = detail instead of e;
-- the reader takes both.) The records are joined once at the end by table.concat: no string is
-- built per event. While every record of the entry has the same head "<kind>\31" and tail
-- "\31<detail ref>\30" (EVRUN: a batch's claims, its completions), EVBUF holds only their ids,
-- joined with tail .. head between them; after the first record that differs, three strings per
-- record (head, id, tail).
-- EVN is read lazily, by the first event of the script (rq_event: a script that writes none, such as
-- a claim that finds nothing or a read-only one, reads nothing), by rq_evseq.
local EVN
local EVTENS -- "x:" .. (EVN - EVN % 10) / 10 for the current ten, or nil (set by rq_event)
local EVBUF, EVCOUNT, EVLEN = {}, 0, 0 -- EVLEN = #EVBUF
local EVRUN, EVRHEAD, EVRTAIL = false, nil, nil -- EVBUF holds ids only; their records' head and tail
local EVREFS, EVDETAILS, EVNDETAILS = {}, {}, 0 -- detail -> its record tail; 'd<ref>', detail, ...
local EVENT_CHUNK = 500

-- The last event id of the stream P.."events" (its last-generated-id "0-<n>": XADD refuses an id not
-- above it, even after the entries were trimmed), 0 without a stream.
local function rq_stream_seq()
  local info = redis.pcall('XINFO', 'STREAM', P .. 'events')
  if type(info) ~= 'table' or info.err then return 0 end -- no stream (or not one: the XADD says so)
  for i = 1, #info - 1, 2 do
    if info[i] == 'last-generated-id' then return tonumber(string.match(info[i + 1], '%-(%d+)$')) or 0 end
  end
  return 0
end

-- The last event id of the queue when P.."evseq" is gone (a new queue, or evicted, deleted): the
-- stream's last id, so that losing it never makes every later XADD fail ("ID ... equal or smaller");
-- without a stream, 0 for a new queue (no P.."counts" nor P.."types" yet: a script writes them after
-- its events), else the stream was lost too and it is the server's clock in microseconds
-- (NOW * 1000), so that ids never go backwards: a reader resuming after an id given before the loss
-- (Last-Event-ID) reads the new ones, which are above any id counted up from 1 and, after an earlier
-- loss, above those counted up from its clock unless over 1,000 events per millisecond were written
-- since (or the clock went back). Below 2^53 until the year 2255, so JavaScript reads it exactly.
local function rq_evseq_lost()
  local last = rq_stream_seq()
  if last > 0 then return last end
  if redis.call('EXISTS', P .. 'counts', P .. 'types') == 0 then return 0 end -- a new queue: 1, 2, ...
  return NOW * 1000
end

-- The last event id of the queue: P.."evseq", else rq_evseq_lost (the stream's XINFO only then).
local function rq_evseq()
  local seq = redis.call('GET', P .. 'evseq')
  if seq then return tonumber(seq) or rq_evseq_lost() end
  return rq_evseq_lost()
end

local function rq_flush_events()
  if EVCOUNT == 0 then return end
  local e
  if not EVRUN then
    e = table.concat(EVBUF, '', 1, EVLEN)
  elseif EVLEN == 1 then
    e = EVRHEAD .. EVBUF[1] .. EVRTAIL
  else
    EVBUF[1] = EVRHEAD .. EVBUF[1]
    EVBUF[EVLEN] = EVBUF[EVLEN] .. EVRTAIL
    e = table.concat(EVBUF, EVRTAIL .. EVRHEAD, 1, EVLEN)
  end
  -- '%d': concatenated, an id of 15 digits or more (rq_evseq_lost's) would read "1.8e+15"
  local seq = string.format('%d', EVN)
  local added = redis.pcall('XADD', P .. 'events', 'MAXLEN', '~', STREAM_MAXLEN, '0-' .. seq, 'at', NOWS, 'n',
    EVCOUNT, 'e', e, unpack(EVDETAILS))
  if type(added) == 'table' and added.err then
    -- P.."evseq" behind the stream (set back by hand, restored from an older copy): this entry and
    -- every later one continue after the stream's last id. (The activity hashes keep this entry's
    -- events under the ids they were given.)
    local last = rq_stream_seq()
    if last < EVN then error(added) end -- another error (WRONGTYPE): raised as it was
    EVN = last + EVCOUNT
    EVTENS = nil -- the next event's field name is formatted anew
    seq = string.format('%d', EVN)
    redis.call('XADD', P .. 'events', 'MAXLEN', '~', STREAM_MAXLEN, '0-' .. seq, 'at', NOWS, 'n', EVCOUNT,
      'e', e, unpack(EVDETAILS))
  end
  redis.call('SET', P .. 'evseq', seq)
  EVBUF, EVCOUNT, EVLEN, EVRUN = {}, 0, 0, false
  EVREFS, EVDETAILS, EVNDETAILS = {}, {}, 0
end

-- The ids of an EVRUN spread into records of three strings (a record that differs follows).
local function rq_spread_events()
  local buf, head, tail = EVBUF, EVRHEAD, EVRTAIL
  for i = EVLEN, 1, -1 do -- backwards: record i moves to 3i-2..3i, never over an id not moved yet
    local id = buf[i]
    buf[3 * i - 2] = head
    buf[3 * i - 1] = id
    buf[3 * i] = tail
  end
  EVLEN = 3 * EVLEN
  EVRUN = false
end

-- The hash values of the script's events by kind, then by detail (a batch repeats them: every
-- claim of one call has the same "claimed\31<now>\31<worker>"); the record heads "<kind>\31".
local EVVALUES, EVHEADS = {}, {}
-- Event field names: "x:" .. the event id, formatted once per ten ids ("x:<id // 10>" .. last digit).
local DIGITS = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}

local EVLKIND, EVLDETAIL, EVLVALUE -- kind, detail and hash value of the last event rq_record took

-- Put the record of event (`id`, `kind`, `detail`) into EVBUF; returns its hash value.
local function rq_record(id, kind, detail)
  local n = EVLEN
  local head = EVHEADS[kind]
  if not head then head = kind .. '\31'; EVHEADS[kind] = head end
  local values = EVVALUES[kind]
  if not values then values = {}; EVVALUES[kind] = values end
  local value, tail
  if detail then
    tail = EVREFS[detail]
    if not tail then
      EVNDETAILS = EVNDETAILS + 1
      local ref = string.format('%d', EVNDETAILS)
      EVDETAILS[2 * EVNDETAILS - 1] = 'd' .. ref
      EVDETAILS[2 * EVNDETAILS] = detail
      tail = '\31' .. ref .. '\30'
      EVREFS[detail] = tail
    end
    value = values[detail]
    if not value then
      value = kind .. '\31' .. NOWS .. '\31' .. detail
      values[detail] = value
    end
  else
    tail = '\31\30'
    value = values[false]
    if not value then
      value = kind .. '\31' .. NOWS
      values[false] = value
    end
  end
  if n == 0 then
    EVRUN, EVRHEAD, EVRTAIL = true, head, tail
    EVBUF[1] = id
    EVLEN = 1
  elseif EVRUN and head == EVRHEAD and tail == EVRTAIL then
    EVBUF[n + 1] = id
    EVLEN = n + 1
  else
    if EVRUN then
      rq_spread_events()
      n = EVLEN
    end
    EVBUF[n + 1] = head
    EVBUF[n + 2] = id
    EVBUF[n + 3] = tail
    EVLEN = n + 3
  end
  EVLKIND, EVLDETAIL, EVLVALUE = kind, detail, value
  return value
end

-- claim.lua, ack.lua and enqueue.lua inline the fast path below (and the field name after it) in
-- their loops: a change here goes there too.
local function rq_event(id, kind, detail)
  EVN = (EVN or rq_evseq()) + 1
  EVCOUNT = EVCOUNT + 1
  local value
  if EVRUN and kind == EVLKIND and detail == EVLDETAIL then
    -- the usual case, the next event of a batch: the record is the id, the value the last one's
    -- (EVRUN: the run began in this stream entry, with this detail's ref)
    local n = EVLEN + 1
    EVBUF[n] = id
    EVLEN = n
    value = EVLVALUE
  else
    value = rq_record(id, kind, detail)
  end
  local last = EVN % 10
  if last == 0 or not EVTENS then
    local tens = (EVN - last) / 10
    EVTENS = tens > 0 and ('x:' .. string.format('%d', tens)) or 'x:'
  end
  local field = EVTENS .. DIGITS[last]
  if EVCOUNT >= EVENT_CHUNK then rq_flush_events() end
  return field, value
end

-- Sorted-set and set writes are buffered per key and sent as one variadic call per key by
-- rq_flush() (removals first), which every script calls before it returns and before it reads
-- a set it may have buffered writes for.
local ZADDS, ZREMS, SADDS, COUNTS = {}, {}, {}, {}
local CHUNK = 4000
-- Finished activities for P.."fin", by the text of their expiry score (rq_fin, written by rq_flush).
local FINS = {}
-- The ids of the last batch rq_flush wrote to P.."fin" and their text "<id>,<id>,..." (see rq_joined).
local FINIDS, FINTEXT

-- table.concat(ids, ','): the text of the last P.."fin" batch when `ids` holds the same ids in the
-- same order (an ack publishes on P.."done" what it recorded for the reaper), else joined anew.
local function rq_joined(ids, n)
  local fin = FINIDS
  if fin and #fin == n then
    if fin == ids then return FINTEXT end
    local same = true
    for i = 1, n do
      if fin[i] ~= ids[i] then same = false; break end
    end
    if same then return FINTEXT end
  end
  return table.concat(ids, ',', 1, n)
end

-- Record finished activity `id` (finished now) for the reaper, to be removed at `score` (ms, text).
local function rq_fin(score, id)
  local t = FINS[score]
  if not t then t = {}; FINS[score] = t end
  t[#t + 1] = id
end

-- The member of an activity in the lex-ordered indexes: created ms as 15 digits, ':', id
-- (`created` is the decimal text of the hash field c).
local function rq_member(created, id)
  if not created then return '000000000000000:' .. id end -- a hash without c (damaged): never fail a batch
  if #created == 13 then return '00' .. created .. ':' .. id end -- the usual case, cheaply
  if #created == 15 then return created .. ':' .. id end
  return string.format('%015d', tonumber(created) or 0) .. ':' .. id
end

-- A script checks the stored numbers of an activity before it writes anything for it: a corrupt
-- hash (a field that is no integer, runnerq_fast/backends/rowcheck.py) is dead-lettered alone or
-- skipped, never an error halfway through a batch. `checks` = {position in h, field name, ...};
-- returns nil, or the reason "corrupt row: <name> is '<value>', not an integer[; ...]".
local function rq_corrupt(h, checks)
  local bad
  for i = 1, #checks, 2 do
    local v = h[checks[i]]
    local digits = v and string.match(v, '^%-?(%d+)$')
    if not digits or #digits > 18 then
      local shown = v and ("'" .. string.gsub(string.sub(v, 1, 37), '[^\32-\126]', '?') .. "'") or 'missing'
      local text = checks[i + 1] .. ' is ' .. shown .. ', not an integer'
      bad = bad and (bad .. '; ' .. text) or text
    end
  end
  return bad and ('corrupt row: ' .. bad)
end

-- The index member of a possibly corrupt activity hash: rq_member, unless its creation time is no
-- integer; then the member is looked up by id in its type's index (a scan, for a damaged hash only).
local function rq_member_of(created, id, typ)
  if created and #created == 13 then return '00' .. created .. ':' .. id end -- the usual case, cheaply
  if created and #created <= 15 and string.find(created, '^%d+$') then return rq_member(created, id) end
  local cursor = '0'
  repeat
    local r = redis.call('ZSCAN', P .. 'ty:' .. typ, cursor, 'MATCH', '*:' .. id, 'COUNT', 1000)
    cursor = r[1]
    if r[2][1] then return r[2][1] end
  until cursor == '0'
  return rq_member(created, id)
end

-- The numbers of an activity (hash field n) as strings, indexed by the N* positions below; {} for
-- a missing or unparseable field (every number then reads as missing).
local NC, NR, NPR, NRC, NMR, NTO = 1, 2, 3, 4, 5, 6
local function rq_nums(n)
  if not n then return {} end
  local c, r, pr, rc, mr, to = string.match(n, '^([^:]*):([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)$')
  if not c then return {} end
  return {c, r, pr, rc, mr, to}
end

-- The field n of the numbers `t` (as rq_nums returns them; numbers are formatted as integers).
local function rq_pack(t)
  local f = {}
  for i = 1, 6 do
    local v = t[i]
    f[i] = type(v) == 'number' and string.format('%d', v) or v
  end
  return f[1] .. ':' .. f[2] .. '\31' .. f[3] .. '\31' .. f[4] .. '\31' .. f[5] .. '\31' .. f[6]
end

-- The first 16 bytes of a field n when they are "<created, 15 digits>:" (else false), by field n:
-- the activities of one enqueue batch share their field n, so it is cut once per value.
local NHEADS = {}
local function rq_nhead(n)
  local head = string.byte(n, 16) == 58 and string.sub(n, 1, 16)
  NHEADS[n] = head
  return head
end

-- The index member of activity `id` from its field n: its first 16 bytes ("<created, 15 digits>:")
-- and the id; a damaged field n gives the member of its creation time (rq_member).
local function rq_mem(n, id)
  if n then
    local head = NHEADS[n]
    if head == nil then head = rq_nhead(n) end
    if head then return head .. id end
  end
  return rq_member(rq_nums(n)[NC], id)
end

-- rq_mem for a possibly corrupt activity: a creation time that is no integer is looked up by id
-- in the type's index (rq_member_of).
local function rq_mem_of(n, id, typ)
  if n then
    local head = NHEADS[n]
    if head == nil then head = rq_nhead(n) end
    if head then return head .. id end
  end
  return rq_member_of(rq_nums(n)[NC], id, typ)
end

-- Buffered change of the per (status, type) counters, flushed by rq_flush (by status, then type:
-- the field "<status>\31<type>" is built once per pair, not once per activity).
local function rq_count(status, typ, delta)
  local t = COUNTS[status]
  if not t then t = {}; COUNTS[status] = t end
  t[typ] = (t[typ] or 0) + delta
end

-- Each buffer keeps its length in field n (the # operator is a binary search in Lua 5.1).
local function rq_zadd(key, score, member)
  local t = ZADDS[key]
  if not t then t = {n = 0}; ZADDS[key] = t end
  local n = t.n
  t[n + 1] = score
  t[n + 2] = member
  t.n = n + 2
end

local function rq_zrem(key, member)
  local t = ZREMS[key]
  if not t then t = {n = 0}; ZREMS[key] = t end
  local n = t.n + 1
  t[n] = member
  t.n = n
end

-- The next batch number when P.."finseq" counted 1: the first batch of the queue, or the counter was
-- lost (evicted, deleted) while batches of P.."fin" are still waiting; then it goes on after the
-- highest of them (read once, only then), so that no batch overwrites one the reaper has not removed.
local function rq_finseq_lost()
  local high = 0
  local n = redis.call('ZCARD', P .. 'fin')
  for i = 0, n - 1, CHUNK do
    for _, member in ipairs(redis.call('ZRANGE', P .. 'fin', i, i + CHUNK - 1)) do
      local k = tonumber(string.match(member, '^b(%d+)$'))
      if k and k > high then high = k end
    end
  end
  if high == 0 then return 1 end
  redis.call('SET', P .. 'finseq', high + 1)
  return high + 1
end

local function rq_flush()
  for key, t in pairs(ZREMS) do
    local n = t.n
    for i = 1, n, CHUNK do redis.call('ZREM', key, unpack(t, i, math.min(i + CHUNK - 1, n))) end
  end
  for key, t in pairs(ZADDS) do
    local n = t.n
    for i = 1, n, CHUNK do redis.call('ZADD', key, unpack(t, i, math.min(i + CHUNK - 1, n))) end
  end
  for key, t in pairs(SADDS) do
    local members = {}
    for m, _ in pairs(t) do members[#members + 1] = m end
    redis.call('SADD', key, unpack(members))
  end
  for status, t in pairs(COUNTS) do
    for typ, d in pairs(t) do
      local f = status .. '\31' .. typ
      if d ~= 0 and redis.call('HINCRBY', P .. 'counts', f, d) <= 0 then redis.call('HDEL', P .. 'counts', f) end
    end
  end
  for score, ids in pairs(FINS) do
    local seq = redis.call('INCR', P .. 'finseq')
    if seq == 1 then seq = rq_finseq_lost() end
    local batch = 'b' .. seq
    local text = table.concat(ids, ',')
    -- one SET, not SET and APPEND: APPEND leaves the value in an allocation twice its size
    redis.call('SET', P .. 'finb:' .. batch, NOWS .. '\31' .. text)
    redis.call('ZADD', P .. 'fin', score, batch)
    FINIDS, FINTEXT = ids, text
  end
  ZADDS, ZREMS, SADDS, COUNTS, FINS = {}, {}, {}, {}, {}
  rq_flush_events()
end

-- Status change of activity `id` (type `typ`, index member `mem`) from `old` (nil: new) to `new`.
-- There is no P.."st:processing": the lease set holds the processing ids, and claim and ack
-- already write it (one sorted-set write less per claim and per ack).
local STKEYS = {} -- P.."st:"..status by status, built once per script
local function rq_st(status)
  local k = STKEYS[status]
  if not k then k = P .. 'st:' .. status; STKEYS[status] = k end
  return k
end

local function rq_move(id, typ, mem, old, new)
  if old then
    if old ~= 'processing' then rq_zrem(rq_st(old), mem) end
    rq_count(old, typ, -1)
  end
  if new ~= 'processing' then rq_zadd(rq_st(new), '0', mem) end
  rq_count(new, typ, 1)
end

-- Types whose blocked fetchers rq_wake() wakes: work of the type became ready, or the type's
-- activity is the new earliest of P.."sched" (fetchers time their wait by its head).
local WOKEN = {}
local SCHED_HEAD -- earliest ready time in P.."sched" as this script left it (read once, lazily)

-- Put a non-terminal activity where a claim finds it; returns true if it is ready now. A suspect
-- (`suspect` truthy: the su field) that is ready goes to P.."susp:"..type, not P.."ready:"..type.
local function rq_make_ready(id, typ, priority, retry_count, ready_ms, suspect)
  if ready_ms > NOW then
    if not SCHED_HEAD then
      local head = redis.call('ZRANGE', P .. 'sched', 0, 0, 'WITHSCORES')
      SCHED_HEAD = tonumber(head[2]) or math.huge
    end
    if ready_ms < SCHED_HEAD then
      SCHED_HEAD = ready_ms
      WOKEN[typ] = true
    end
    rq_zadd(P .. 'sched', ready_ms, id)
    return false
  end
  WOKEN[typ] = true
  rq_zadd(P .. (suspect and 'susp:' or 'ready:') .. typ, rq_score(priority, retry_count, ready_ms), id)
  local types = SADDS[P .. 'types']
  if not types then types = {}; SADDS[P .. 'types'] = types end
  types[typ] = true
  return true
end

-- One token for the fetchers of each woken type, and one for those of every type; a fetcher
-- blocks on the lists of the types it claims, so a token never goes to one that cannot use it.
local function rq_wake()
  local any = false
  for typ, _ in pairs(WOKEN) do
    any = true
    redis.call('LPUSH', P .. 'wake:' .. typ, '1')
    redis.call('LTRIM', P .. 'wake:' .. typ, 0, WAKE_TOKENS - 1)
  end
  if any then
    redis.call('LPUSH', P .. 'wake', '1')
    redis.call('LTRIM', P .. 'wake', 0, WAKE_TOKENS - 1)
  end
  WOKEN = {}
end

-- Terminal transition from status `old`; the reaper removes the activity ttl_ms later, except
-- a dead letter.
-- The claim token and lease stay in the hash: the status guards every ack and extension.
-- `detail` is the event's detail (default: `err`, which also becomes the last error).
local FINSCORES = {} -- the P.."fin" score (NOW + ttl ms) as text, by ttl, formatted once per script
local function rq_finish(id, typ, mem, old, status, result, err, ttl_ms, detail)
  local k = P .. 'a:' .. id
  local ef, ev = rq_event(id, status, detail or err)
  if status ~= 'dead_letter' and not err then -- the usual case (completed, cancelled): one call, no table
    if result then
      redis.call('HSET', k, 's', status, 'fa', NOWS, ef, ev, 'res', result)
    else
      redis.call('HSET', k, 's', status, 'fa', NOWS, ef, ev)
    end
  else
    local args = {'s', status, 'fa', NOWS, ef, ev}
    if status == 'dead_letter' then
      args[#args + 1] = 'da'
      args[#args + 1] = NOWS
    end
    if result then
      args[#args + 1] = 'res'
      args[#args + 1] = result
    end
    if err then
      args[#args + 1] = 'e'
      args[#args + 1] = err
    end
    redis.call('HSET', k, unpack(args))
  end
  rq_move(id, typ, mem, old, status)
  if status == 'dead_letter' then
    rq_zadd(P .. 'dead', NOWS, id)
  else
    local score = FINSCORES[ttl_ms]
    if not score then
      score = tostring(NOW + tonumber(ttl_ms))
      FINSCORES[ttl_ms] = score
    end
    rq_fin(score, id)
  end
  return ef -- the event's field (ack.lua keeps a failed attempt's traceback beside it)
end

-- Remove finished activity `id` (status `st`, type `typ`, hash field n `nums`, parent `pa`,
-- idempotency key `ik`): its hash (events and result with it), every index entry, its counter,
-- and its idempotency key while the key still names it: released (prune, delete), or with
-- `keep_key` (the reaper dropping an expired result) kept until its own ttl as "<id>\31<status>",
-- so the key still deduplicates for idempotency_ttl.
local function rq_forget(id, st, typ, nums, pa, ik, keep_key)
  local mem = rq_mem(nums, id)
  redis.call('UNLINK', P .. 'a:' .. id)
  rq_zrem(P .. 'st:' .. st, mem)
  rq_count(st, typ, -1)
  rq_zrem(P .. 'ty:' .. typ, mem)
  if pa then rq_zrem(P .. 'kids:' .. pa, mem) end
  if st == 'dead_letter' then rq_zrem(P .. 'dead', id) else rq_zrem(P .. 'fin', id) end
  if ik then
    local ikey = P .. 'idem:' .. #typ .. ':' .. typ .. ':' .. ik
    if redis.call('GET', ikey) == id then
      if keep_key then redis.call('SET', ikey, id .. '\31' .. st, 'KEEPTTL') else redis.call('DEL', ikey) end
    end
  end
end
