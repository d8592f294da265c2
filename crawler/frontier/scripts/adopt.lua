-- KEYS: (prelude), leases, owner
-- ARGV: (prefix), worker, lease deadline, then pairs (id, record)
-- Requests a worker made and kept for itself (on a turn it took ahead, see credit.lua) written
-- as leased to it, as if popped: before the acknowledgement of the page that made them, so a
-- worker that dies leaves them to expire and come back to the queue like any lease.
local worker, deadline = ARGV[2], ARGV[3]
for a = 4, #ARGV, 2 do
  local id, record = ARGV[a], ARGV[a + 1]
  redis.call('HSET', Q.data, id, record)
  redis.call('ZADD', KEYS[4], deadline, id)
  redis.call('HSET', KEYS[5], id, worker)
end
return #ARGV
