-- KEYS: the receiving spider's start list, the set of keys handed over (scored by the time until
-- which each is not handed again), and optionally the receiving spider's revisit set
-- ARGV: now, hold (the time until which a key now handed is not handed again), n, then n keys,
-- their n entries and, with a revisit set, the n fingerprints their pages' revisits wait under
-- Pushes (LPUSH, in the order given) the entry of each key not handed over until now whose page
-- has no revisit waiting, marks those keys until ``hold`` and trims the marks that expired.
-- Returns the keys pushed. One script: two workers never hand the same key over twice. The keys
-- belong to two spiders (two hash tags): on Redis Cluster the check and the push go apart.
local now, hold, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local pushed, entries = {}, {}
for i = 1, n do
  local key = ARGV[3 + i]
  local mark = redis.call('ZSCORE', KEYS[2], key)
  local new = (not mark) or tonumber(mark) <= now
  if new and KEYS[3] then
    new = not redis.call('ZSCORE', KEYS[3], ARGV[3 + 2 * n + i])
  end
  if new then
    pushed[#pushed + 1] = key
    entries[#entries + 1] = ARGV[3 + n + i]
  end
end
for first = 1, #entries, 1000 do
  local last = math.min(first + 999, #entries)
  redis.call('LPUSH', KEYS[1], unpack(entries, first, last))
  for i = first, last do
    redis.call('ZADD', KEYS[2], hold, pushed[i])
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
return pushed
