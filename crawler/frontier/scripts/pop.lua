-- KEYS: (prelude), delayed, leases, owner, cancelled jobs, job deadlines, paused jobs, job
-- budgets, jobs' requests handed out
-- ARGV: (prefix), now, count, lease deadline, worker, then pacing: bucket key prefix ("" for
-- none), identity, rate (0 = unlimited), burst, recovery (factor/s), horizon (s), scan budget,
-- look-ahead (s), then (domain, rate) pairs.
-- Moves due delayed requests and expired leases back to the queue (paced ones whose turn has
-- come are leased as they are), then leases up to ``count`` requests to ``worker``. Returns
-- {promoted, reclaimed, queue size, next due (the earliest due time left in the delayed set,
-- "0" when it is empty), paced flags (one "1"/"0" per leased request: its token taken here),
-- 1 when the scan budget ran out before the queue while requests were still being placed (else
-- 0), due times (one per leased request, comma-separated: "0" to send now, else the Unix time of
-- its turn), id1, json1, id2, json2, ...}.
-- Paced, a turn due within the look-ahead is leased at once (up to ``count`` of them besides
-- the ``count`` sent now) until its time plus the lease: the worker holds it and sends it on
-- time, and needs no pop to get it. A record of a cancelled or expired job is dropped
-- instead, one of a paused job parked (queue.lua's held_back), one of a job that spent its
-- page budget dropped.
set_job_keys(7)
local now, count, deadline, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local pacing = read_pacing(6)
local result, flags, dues = {0, 0, 0, '0', '', 0, ''}, {}, {}
local ahead_left = pacing and P.ahead > 0 and count or 0
local lease_seconds = tonumber(deadline) - now

-- Leases the request to the worker; ``at``, when given, is its turn within the look-ahead.
local function lease(id, record, paced, at)
  redis.call('ZADD', KEYS[5], at and fmt(at + lease_seconds) or deadline, id)
  redis.call('HSET', KEYS[6], id, worker)
  result[#result + 1] = id
  result[#result + 1] = record
  flags[#flags + 1] = paced and '1' or '0'
  dues[#dues + 1] = at and fmt(at) or '0'
  if at then ahead_left = ahead_left - 1 else count = count - 1 end
end


-- One queued record: leased now, given its host's next turn, or (nil) left for later.
-- ``counted``: a turn missed, placed again, whose job's budget counted it when it was given.
local function place(n, priority, record, counted)
  if held_back(record, priority, now) or (not counted and dropped_over_budget(record)) then
    return true
  end
  local id = new_id(n, priority)
  local host = pacing and host_of(record)
  local at = now
  if host then
    local rate, burst = rate_of(host, record)
    if rate > 0 then at = reserve(host, rate, burst, now) end
    if at == nil then return false end
  end
  if not counted then spend(record) end
  local ahead = at > now and at <= now + P.ahead and ahead_left > 0
  if at > now and not ahead then id = id .. '|s' end
  redis.call('HSET', Q.data, id, record)
  if ahead then
    lease(id, record, true, at)
  elseif at > now then
    redis.call('ZADD', KEYS[4], at, id)
  else
    lease(id, record, host and true or false)
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

-- A turn whose record its job holds back (dropped, or parked with its priority): its id
-- leaves the data as a leased one would not.
local function turn_held(id, record)
  if not held_back(record, function() return priority_of(id) end, now) then return false end
  redis.call('HDEL', Q.data, id)
  return true
end

local horizon = now + (ahead_left > 0 and P.ahead or 0)
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', fmt(horizon), 'WITHSCORES', 'LIMIT', 0,
  1000)
local back, turns, missed = {}, {}, {}
for i = 1, #due, 2 do
  local id, at = due[i], tonumber(due[i + 1])
  local on_turn = string.sub(id, -2) == '|s'  -- waiting for its host's turn (pace.lua)
  if not on_turn then
    if at <= now then back[#back + 1] = id end
  elseif at <= now and count > 0 then
    turns[#turns + 1] = id
    local record = redis.call('HGET', Q.data, id)
    if record and not turn_held(id, record) then
      if late(record, at) then missed[#missed + 1] = id else lease(id, record, true) end
    end
  elseif at > now and ahead_left > 0 then
    turns[#turns + 1] = id
    local record = redis.call('HGET', Q.data, id)
    if record and not turn_held(id, record) then lease(id, record, true, at) end
  end
end
if #back > 0 then
  requeue(back)
  redis.call('ZREM', KEYS[4], unpack(back))
end
if #turns > 0 then redis.call('ZREM', KEYS[4], unpack(turns)) end
for _, id in ipairs(missed) do
  local priority, record = priority_of(id), redis.call('HGET', Q.data, id)
  redis.call('HDEL', Q.data, id)
  if not place(redis.call('INCR', Q.seq), priority, record, true) then
    push(priority, record, true)
  end
end
result[1] = #back
local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[2], 'LIMIT', 0, 1000)
if #expired > 0 then
  requeue(expired)
  redis.call('ZREM', KEYS[5], unpack(expired))
  redis.call('HDEL', KEYS[6], unpack(expired))
end
result[2] = #expired

local budget, index, placed = pacing and P.budget or math.huge, 0, 0
-- Records held back by their jobs (a paused job's backlog parked, a cancelled one's or one
-- past its page budget dropped) are looked at up to this many per call; the rest wait for the
-- next pops.
local held_limit = Q.held + 1000 + 10 * count
while count > 0 and budget > 0 and Q.held < held_limit do
  local top = redis.call('ZRANGE', Q.queues, index, index)
  if #top == 0 then break end
  local priority = top[1]
  local list = Q.prefix .. priority
  local unseen, later = redis.call('LLEN', list), {}
  while count > 0 and budget > 0 and unseen > 0 and Q.held < held_limit do
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
local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
if #first > 0 then result[4] = first[2] end
result[5] = table.concat(flags)
if budget <= 0 and placed > 0 then result[6] = 1 end
result[7] = table.concat(dues, ',')
return result
