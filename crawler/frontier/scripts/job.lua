-- KEYS: (prelude), delayed, leases, cancelled jobs, a spare key of the spider (lists rebuilt)
-- ARGV: (prefix), job number, "count" or "cancel"
-- Counts the job's requests queued, delayed and leased (a record of the job begins with
-- '{"j":<number>,', see codec.py). With "cancel", the number joins the cancelled set first
-- (from then on the pop and the schedule script drop the job's records) and the job's queued
-- and delayed requests are removed: each queue list that holds some is rebuilt without them,
-- the others' order kept. Leased requests are in flight and left to their workers. Runs in
-- one call, so the counts are exact; it reads every queued record (about a second a million).
-- Returns {queued, delayed, leased}, counted before the removal.
local n, cancel = ARGV[2], ARGV[3] == 'cancel'
local head = '{"j":' .. n .. ','
local CHUNK = 1000
local function of_job(record) return string.sub(record, 1, #head) == head end

local function count_list(list, size)
  local found = 0
  for first = 0, size - 1, CHUNK do
    for _, record in ipairs(redis.call('LRANGE', list, first, first + CHUNK - 1)) do
      if of_job(record) then found = found + 1 end
    end
  end
  return found
end

local function rebuild_list(list, size, priority)
  redis.call('DEL', KEYS[9])
  for first = 0, size - 1, CHUNK do
    local kept = {}
    for _, record in ipairs(redis.call('LRANGE', list, first, first + CHUNK - 1)) do
      if not of_job(record) then kept[#kept + 1] = record end
    end
    if #kept > 0 then redis.call('RPUSH', KEYS[9], unpack(kept)) end
  end
  if redis.call('EXISTS', KEYS[9]) == 1 then
    redis.call('RENAME', KEYS[9], list)
  else
    redis.call('DEL', list)
    redis.call('ZREM', Q.queues, priority)
  end
end

-- The job's ids in the sorted set ``key`` (delayed, leases), removed with their records if
-- ``drop``.
local function sweep_ids(key, drop)
  local found = {}
  local size = redis.call('ZCARD', key)
  for first = 0, size - 1, CHUNK do
    for _, id in ipairs(redis.call('ZRANGE', key, first, first + CHUNK - 1)) do
      local record = redis.call('HGET', Q.data, id)
      if record and of_job(record) then found[#found + 1] = id end
    end
  end
  if drop then
    for i = 1, #found, CHUNK do
      local part = {unpack(found, i, math.min(i + CHUNK - 1, #found))}
      redis.call('ZREM', key, unpack(part))
      redis.call('HDEL', Q.data, unpack(part))
      redis.call('HDEL', Q.legacy_prio, unpack(part))
    end
  end
  return #found
end

if cancel then redis.call('SADD', KEYS[8], n) end
local queued = 0
for _, priority in ipairs(redis.call('ZRANGE', Q.queues, 0, -1)) do
  local list = Q.prefix .. priority
  local size = redis.call('LLEN', list)
  local found = count_list(list, size)
  if cancel and found > 0 then rebuild_list(list, size, priority) end
  queued = queued + found
end
return {queued, sweep_ids(KEYS[6], cancel), sweep_ids(KEYS[7], false)}
