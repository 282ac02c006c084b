-- runnerq-fast Redis helper: the ready-set score (prepended to scripts that need it).
-- Keys: none.
--
-- Same value as runnerq_fast.backends.redis._scoring_py.encode_score: a 64-bit key
--   bit 63 = 0, bits 60..62 = 5 - priority, bits 44..59 = 65535 - min(retry_count, 65535),
--   bits 0..43 = ready time in epoch ms clamped to [0, 2^44 - 1]
-- used as the bit pattern of a positive double. The two 32-bit halves are built
-- arithmetically (exact in doubles) and reinterpreted with the struct library.
local function rq_score(priority, retry_count, ready_ms)
  local rank = 65535 - math.min(retry_count, 65535)
  local ready = math.min(math.max(ready_ms, 0), 17592186044415)
  local ready_hi = math.floor(ready / 4294967296)
  local lo = ready - ready_hi * 4294967296
  local hi = (5 - priority) * 268435456 + rank * 4096 + ready_hi
  return (struct.unpack('>d', struct.pack('>I4I4', hi, lo)))
end
