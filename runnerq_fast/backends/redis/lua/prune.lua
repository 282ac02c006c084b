-- runnerq-fast: one prune batch: finished activities of the given statuses that finished more
-- than ARGV[1] ms ago go, with their hash (events and result), index entries, counts and
-- idempotency keys (rq_forget); nothing goes to the live stream.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."st:"..status, P.."a:"..id, P.."ty:"..type,
--   P.."kids:"..parent, P.."counts", P.."fin", P.."dead",
--   P.."idem:"..#type..":"..type..":"..key.
-- ARGV: age (ms), limit, most index entries to examine, then the finished statuses.
-- Each status's P.."st:" set is walked in (created, id) order up to the members created before
-- the cutoff (an activity cannot finish before it was created); one that finished later is
-- passed over. Returns: {activities deleted, index entries examined}.
local before = NOW - tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local upper = '(' .. string.format('%015d', math.max(before, 0)) .. ':'
local deleted, examined = 0, 0
for i = 4, #ARGV do
  local st = ARGV[i]
  local offset = 0
  while deleted < limit and examined < budget do
    local page = redis.call('ZRANGE', P .. 'st:' .. st, '-', upper, 'BYLEX', 'LIMIT', offset,
                            math.min(limit - deleted, budget - examined))
    if #page == 0 then break end
    for _, mem in ipairs(page) do
      examined = examined + 1
      local id = string.sub(mem, 17)
      local h = redis.call('HMGET', P .. 'a:' .. id, 's', 't', 'n', 'pa', 'ik', 'fa')
      if h[1] == st and tonumber(h[6] or 0) < before then
        rq_forget(id, h[1], h[2], h[3], h[4], h[5])
        deleted = deleted + 1
      else
        offset = offset + 1 -- stays in the set: the next page starts after it
      end
    end
    rq_flush() -- the next page must not see the members removed above
  end
end
rq_flush()
return {deleted, examined}
