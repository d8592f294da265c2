-- KEYS: (prelude), delayed, leases, owner
-- ARGV: (prefix), now, count, lease deadline, worker
-- Moves due delayed requests and expired leases back to the queue, then leases up to ``count``
-- requests to ``worker``. Returns {promoted, reclaimed, queue size, next due (the earliest due
-- time left in the delayed set, "0" when it is empty), id1, json1, id2, json2, ...}.

local now, count, deadline, worker = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
migrate_legacy()
local due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  requeue(due)
  redis.call('ZREM', KEYS[6], unpack(due))
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, 1000)
if #expired > 0 then
  requeue(expired)
  redis.call('ZREM', KEYS[7], unpack(expired))
  redis.call('HDEL', KEYS[8], unpack(expired))
end
local result = {#due, #expired, 0, '0'}
while count > 0 do
  local top = redis.call('ZRANGE', Q.queues, 0, 0)
  if #top == 0 then break end
  local priority = top[1]
  local list = Q.prefix .. priority
  local records = redis.call('LPOP', list, count)
  if records then
    local n = redis.call('INCRBY', Q.seq, #records) - #records
    for i, record in ipairs(records) do
      local id = new_id(n + i, priority)
      redis.call('ZADD', KEYS[7], deadline, id)
      redis.call('HSET', KEYS[8], id, worker)
      redis.call('HSET', Q.data, id, record)
      mark_legacy(id, n + i, priority)
      result[#result + 1] = id
      result[#result + 1] = record
    end
    count = count - #records
  end
  if redis.call('EXISTS', list) == 0 then redis.call('ZREM', Q.queues, priority) end
end
result[3] = queued()
local first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
if #first > 0 then result[4] = first[2] end
return result
