-- runnerq-fast: upgrade activity hashes written before the packed layout (the numbers in fields
-- pr, rc, mr, to, c, r and the claim in tk, sa, l) to the fields n and k (lua/_common.lua); a hash
-- without the field c (upgraded already, or not one of these) is left as it is, so a rerun is harmless.
-- KEYS[1] = P = "rq:{<queue>}:"; touches P.."a:"..id.
-- ARGV: ids.
-- Returns: the number of hashes upgraded.
local upgraded = 0
for i = 1, #ARGV do
  local k = P .. 'a:' .. ARGV[i]
  local h = redis.call('HMGET', k, 'n', 'c', 'r', 'pr', 'rc', 'mr', 'to', 'tk', 'sa', 'l')
  if not h[1] and h[2] then
    local created = h[2]
    if #created < 15 and string.find(created, '^%d+$') then created = string.rep('0', 15 - #created) .. created end
    local n = created .. ':' .. (h[3] or '') .. '\31' .. (h[4] or '') .. '\31' .. (h[5] or '') .. '\31' ..
      (h[6] or '') .. '\31' .. (h[7] or '')
    if h[8] then
      redis.call('HSET', k, 'n', n, 'k', h[8] .. '\31' .. (h[9] or '') .. '\31' .. (h[10] or ''))
    else
      redis.call('HSET', k, 'n', n)
    end
    redis.call('HDEL', k, 'c', 'r', 'pr', 'rc', 'mr', 'to', 'tk', 'sa', 'l')
    upgraded = upgraded + 1
  end
end
return upgraded
