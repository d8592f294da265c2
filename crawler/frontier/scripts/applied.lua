-- A batch applied once: ``first_time(key, seq)`` is true when no batch numbered ``seq`` or
-- later was applied yet under ``key`` (a worker's last applied number, kept a day), and notes
-- ``seq`` as applied. A batch sent again (its reply lost, a client's retry) is then skipped.
-- The fleet's stats (crawler/observability/publisher.py) and the links ledger use it.
local function first_time(key, seq)
  if tonumber(seq) <= tonumber(redis.call('GET', key) or '0') then return false end
  redis.call('SET', key, seq, 'EX', 86400)
  return true
end
