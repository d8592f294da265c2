-- KEYS: (prelude), delayed, leases, cancelled jobs, job deadlines, paused jobs, job budgets,
-- jobs' requests handed out, a spare key of the spider (lists rebuilt)
-- ARGV: (prefix), job number, "status", "cancel", "pause", "resume", "expire" or "limit", then
-- the Unix time of the deadline ("expire") or the budget ("limit": the most requests of the
-- job the pop hands out, counted from the first budget the job was given)
-- Counts the job's requests queued, delayed, leased and parked (held while the job is paused;
-- a record's job is read by job_of, queue.lua). "cancel" first adds the
-- number to the cancelled set (from then on the pop and the schedule script drop the job's
-- records) and removes the job's queued, delayed and parked requests: each queue list that
-- holds some is rebuilt without them, the others' order kept. Leased requests are in flight
-- and left to their workers. "pause" adds the number to the paused set (the pop parks the
-- job's records as it meets them), "resume" removes it and puts the parked records back at
-- the end of their lists, "expire" sets the job's deadline, "limit" its budget; each of these
-- leaves a cancelled job alone. Runs in one call, so the counts are exact; it reads every queued record
-- (0.3 s a million; a cancel rebuilding them, 1 s).
-- Returns {queued, delayed, leased, parked, handed out, dropped past the budget}, counted
-- before any removal, then 1 if the job is paused (after ``mode``), else 0, then 1 if it was
-- cancelled before ``mode``, else 0.
local n, mode = ARGV[2], ARGV[3]
local cancel = mode == 'cancel'
set_job_keys(6)
local spare = KEYS[11]
local function of_job(record) return job_of(record) == n end

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
    end
  end
  return #found
end

local parked_list = Q.paused .. ':' .. n
local parked = redis.call('LLEN', parked_list)
local cancelled = redis.call('SISMEMBER', Q.cancelled, n)
if cancel then
  redis.call('SADD', Q.cancelled, n)
  redis.call('SREM', Q.paused, n)  -- cancelled, it waits for nothing
  redis.call('DEL', parked_list)
elseif cancelled == 1 and mode ~= 'status' then
  -- a cancelled job is left as it is: it is never paused, resumed, given a deadline or budget
elseif mode == 'pause' then
  redis.call('SADD', Q.paused, n)
elseif mode == 'resume' then
  redis.call('SREM', Q.paused, n)
  for first = 0, parked - 1, CHUNK do
    for _, entry in ipairs(redis.call('LRANGE', parked_list, first, first + CHUNK - 1)) do
      local cut = string.find(entry, '\n', 1, true)
      push(string.sub(entry, 1, cut - 1), string.sub(entry, cut + 1), false)
    end
  end
  redis.call('DEL', parked_list)
elseif mode == 'expire' then
  redis.call('HSET', Q.expires, n, ARGV[4])
elseif mode == 'limit' then
  redis.call('HSET', Q.budgets, n, ARGV[4])
end
local queued = 0
for _, priority in ipairs(redis.call('ZRANGE', Q.queues, 0, -1)) do
  local list = Q.prefix .. priority
  local size = redis.call('LLEN', list)
  local found = count_in_list(list, size, of_job)
  if cancel and found > 0 and not remove_from_list(list, size, spare, of_job) then
    redis.call('ZREM', Q.queues, priority)
  end
  queued = queued + found
end
local handed = tonumber(redis.call('HGET', Q.spent, n) or '0')
local over = tonumber(redis.call('HGET', Q.spent, n .. ':dropped') or '0')
local paused = redis.call('SISMEMBER', Q.paused, n)
local delayed = sweep_ids(KEYS[4], cancel)
return {queued, delayed, sweep_ids(KEYS[5], false), parked, handed, over, paused, cancelled}
