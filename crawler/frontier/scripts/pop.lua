-- KEYS: (prelude), delayed, leases, owner
-- ARGV: (prefix), now, count, lease deadline, worker, then pacing: bucket key prefix ("" for
-- none), identity, rate (0 = unlimited), burst, recovery (factor/s), horizon (s), scan budget,
-- then (domain, rate) pairs.
-- Moves due delayed requests and expired leases back to the queue (paced ones whose turn has
-- come are leased as they are), then leases up to ``count`` requests to ``worker``. Returns
-- {promoted, reclaimed, queue size, next due (the earliest due time left in the delayed set,
-- "0" when it is empty), paced flags (one "1"/"0" per leased request: its token taken here),
-- 1 when the scan budget ran out before the queue while requests were still being placed (else
-- 0), id1, json1, id2, json2, ...}.
local now, count, deadline, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local pacing = read_pacing(6)
migrate_legacy()
local result, flags = {0, 0, 0, '0', '', 0}, {}

local function lease(id, record, paced)
  redis.call('ZADD', KEYS[7], deadline, id)
  redis.call('HSET', KEYS[8], id, worker)
  result[#result + 1] = id
  result[#result + 1] = record
  flags[#flags + 1] = paced and '1' or '0'
  count = count - 1
end


-- One queued record: leased now, given its host's next turn, or (nil) left for later.
local function place(n, priority, record)
  local id = new_id(n, priority)
  local host = pacing and host_of(record)
  if not host then
    redis.call('HSET', Q.data, id, record)
    mark_legacy(id, n, priority)
    lease(id, record, false)
    return true
  end
  local rate, burst = rate_of(host, record)
  local at = now
  if rate > 0 then at = reserve(host, rate, burst, now) end
  if at == nil then return false end
  if at > now then id = id .. '|s' end
  redis.call('HSET', Q.data, id, record)
  mark_legacy(id, n, priority)
  if at > now then
    redis.call('ZADD', KEYS[6], at, id)
  else
    lease(id, record, true)
  end
  return true
end

-- A turn taken more than one interval late is gone (sent now, it would bunch with the next
-- turns): the request takes a new one.
local function late(record, at)
  local host = host_of(record)
  if not host then return false end
  local rate = rate_of(host, record)
  return rate > 0 and now - at > 1 / rate
end

local due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, 1000)
local back, turns, missed = {}, {}, {}
for i = 1, #due, 2 do
  local id = due[i]
  if string.sub(id, -2) ~= '|s' then back[#back + 1] = id
  elseif count > 0 then
    turns[#turns + 1] = id
    local record = redis.call('HGET', Q.data, id)
    if record and late(record, tonumber(due[i + 1])) then
      missed[#missed + 1] = id
    elseif record then
      lease(id, record, true)
    end
  end
end
if #back > 0 then
  requeue(back)
  redis.call('ZREM', KEYS[6], unpack(back))
end
if #turns > 0 then redis.call('ZREM', KEYS[6], unpack(turns)) end
for _, id in ipairs(missed) do
  local priority, record = priority_of(id), redis.call('HGET', Q.data, id)
  redis.call('HDEL', Q.data, id)
  if not place(redis.call('INCR', Q.seq), priority, record) then push(priority, record, true) end
end
result[1] = #back
local expired = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', ARGV[2], 'LIMIT', 0, 1000)
if #expired > 0 then
  requeue(expired)
  redis.call('ZREM', KEYS[7], unpack(expired))
  redis.call('HDEL', KEYS[8], unpack(expired))
end
result[2] = #expired

local budget, index, placed = pacing and P.budget or math.huge, 0, 0
while count > 0 and budget > 0 do
  local top = redis.call('ZRANGE', Q.queues, index, index)
  if #top == 0 then break end
  local priority = top[1]
  local list = Q.prefix .. priority
  local unseen, later = redis.call('LLEN', list), {}
  while count > 0 and budget > 0 and unseen > 0 do
    local records = redis.call('LPOP', list, math.min(count, budget, unseen))
    unseen, budget = unseen - #records, budget - #records
    local n = redis.call('INCRBY', Q.seq, #records) - #records
    for i, record in ipairs(records) do
      if place(n + i, priority, record) then
        placed = placed + 1
      else
        later[#later + 1] = record
      end
    end
  end
  if #later > 0 then redis.call('RPUSH', list, unpack(later)) end
  if redis.call('EXISTS', list) == 0 then
    redis.call('ZREM', Q.queues, priority)
  else
    index = index + 1
  end
end
result[3] = queued()
local first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
if #first > 0 then result[4] = first[2] end
result[5] = table.concat(flags)
if budget <= 0 and placed > 0 then result[6] = 1 end
return result
