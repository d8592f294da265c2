-- KEYS: (prelude), leases, owner
-- ARGV: (prefix), worker, lease deadline, then triples (id, priority, record)
-- Requests a worker made and kept for itself (on a turn it took ahead, see credit.lua) written
-- as leased to it, as if popped: before the acknowledgement of the page that made them, so a
-- worker that dies leaves them to expire and come back to the queue like any lease.
local worker, deadline = ARGV[2], ARGV[3]
for a = 4, #ARGV, 3 do
  local id, priority, record = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  redis.call('HSET', Q.data, id, record)
  mark_legacy(id, seq_of(id), priority)
  redis.call('ZADD', KEYS[6], deadline, id)
  redis.call('HSET', KEYS[7], id, worker)
end
return #ARGV
