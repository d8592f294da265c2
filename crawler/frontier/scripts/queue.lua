-- The queue: one list per priority, ``{spider}:queue:<priority>``, holding the records
-- themselves (a list packs its elements a few bytes apart), and the sorted set
-- ``{spider}:queues`` of the priorities with a list, scored -priority so the highest comes
-- first. A request gets its id when it leaves the queue (leased) or is delayed; its priority
-- rides in the id ("<n>" for priority 0, "<n>:<priority>" otherwise), so it finds its list
-- again. A record outside the queue (leased, delayed) waits in the ``data`` hash under its id.
--
-- The prelude, set in Q at the end of this file: every frontier script begins with the same
-- three keys and the queue lists' prefix. KEYS: queues, data, seq; ARGV[1]: "{spider}:queue:".

local Q = {}
local LISTED = {}
local function push(priority, record, head)
  local list = Q.prefix .. priority
  redis.call(head and 'LPUSH' or 'RPUSH', list, record)
  if not LISTED[priority] then
    redis.call('ZADD', Q.queues, -tonumber(priority), priority)
    LISTED[priority] = true
  end
end

local function priority_of(id)
  return string.match(id, '^%d+:(-?%d+)') or '0'
end

local function seq_of(id)
  return tonumber(string.match(id, '^%d+')) or 0
end

-- Records of ``ids`` (leased or delayed) back at the head of their priority's list, the
-- earliest id first: where they were when they left.
local function requeue(ids)
  local sorted = {unpack(ids)}
  table.sort(sorted, function(a, b) return seq_of(a) < seq_of(b) end)
  for i = #sorted, 1, -1 do
    local id = sorted[i]
    local priority = priority_of(id)
    local record = redis.call('HGET', Q.data, id)
    if record then
      redis.call('HDEL', Q.data, id)
      push(priority, record, true)
    end
  end
end

-- Requests queued; ``parked``: with those of paused jobs parked too (work that keeps the
-- fleet open, though no pop hands it out).
local function queued(parked)
  local total = 0
  for _, priority in ipairs(redis.call('ZRANGE', Q.queues, 0, -1)) do
    total = total + redis.call('LLEN', Q.prefix .. priority)
  end
  if parked then
    for _, n in ipairs(redis.call('SMEMBERS', Q.paused)) do
      total = total + redis.call('LLEN', Q.paused .. ':' .. n)
    end
  end
  return total
end

-- The number of ``record``'s job (a string), nil without one: the digits in front of the
-- record ('12{"u":...'), or its first field in the JSON form ('{"j":12,', see codec.py).
local function job_of(record)
  return string.match(record, '^(%d+){') or string.match(record, '^{"j":(%d+),')
end

-- What becomes of ``record`` by its job (job_of). Returns nil to go on (no job, or a running one), 'drop' for a job cancelled
-- or past its deadline (``now``), or the number of a paused job (its records wait in the list
-- Q.paused .. ':' .. <n>, each "<priority>\n<record>"). Q.cancelled (set), Q.expires (hash
-- number -> Unix time) and Q.paused (set) are set by a script that holds jobs' records back;
-- they are read once per call, and only when a record carries a job.
local JOBS
local function job_hold(record, now)
  local n = job_of(record)
  if not n then return nil end
  if not JOBS then
    JOBS = {cancelled = {}, expires = {}, paused = {}}
    for _, m in ipairs(redis.call('SMEMBERS', Q.cancelled)) do JOBS.cancelled[m] = true end
    for _, m in ipairs(redis.call('SMEMBERS', Q.paused)) do JOBS.paused[m] = true end
    local expires = redis.call('HGETALL', Q.expires)
    for i = 1, #expires, 2 do JOBS.expires[expires[i]] = tonumber(expires[i + 1]) end
  end
  local deadline = JOBS.expires[n]
  if JOBS.cancelled[n] or (deadline and now >= deadline) then return 'drop' end
  if JOBS.paused[n] then return n end
  return nil
end

-- Holds ``record`` back by its job (see job_hold): true when it is dropped or parked.
-- ``priority`` is its priority, or a function giving it (called only to park it). Q.held
-- counts the records held back in this call.
Q.held = 0
local function held_back(record, priority, now)
  local hold = job_hold(record, now)
  if hold == nil then return false end
  Q.held = Q.held + 1
  if hold ~= 'drop' then
    if type(priority) == 'function' then priority = priority() end
    redis.call('RPUSH', Q.paused .. ':' .. hold, priority .. '\n' .. record)
  end
  return true
end

-- A job's page budget: Q.budgets (hash number -> the most requests the pop hands out) and
-- Q.spent (hash number -> how many it did; "<number>:dropped" -> how many it dropped past the
-- budget). Returns the record's job number when its job has a budget, else nil.
local BUDGETS
local function budget_of(record)
  local n = job_of(record)
  if not n then return nil end
  if not BUDGETS then
    BUDGETS = {}
    local raw = redis.call('HGETALL', Q.budgets)
    for i = 1, #raw, 2 do BUDGETS[raw[i]] = tonumber(raw[i + 1]) end
  end
  if BUDGETS[n] then return n end
  return nil
end

-- Drops the record when its job has had as many requests handed out as its budget allows:
-- counted for the job's status (``over_budget``) and in Q.held, as a record held back is (a
-- pop looks at a bounded number of them). Returns whether it dropped it.
local function dropped_over_budget(record)
  local n = budget_of(record)
  if n == nil or tonumber(redis.call('HGET', Q.spent, n) or '0') < BUDGETS[n] then
    return false
  end
  redis.call('HINCRBY', Q.spent, n .. ':dropped', 1)
  Q.held = Q.held + 1
  return true
end

-- One more request of the record's job handed out (leased, or given a turn).
local function spend(record)
  local n = budget_of(record)
  if n then redis.call('HINCRBY', Q.spent, n, 1) end
end

local function set_job_keys(first)
  Q.cancelled, Q.expires, Q.paused = KEYS[first], KEYS[first + 1], KEYS[first + 2]
  Q.budgets, Q.spent = KEYS[first + 3], KEYS[first + 4]
end

Q.queues, Q.data, Q.seq = KEYS[1], KEYS[2], KEYS[3]
Q.prefix = ARGV[1]
local function new_id(n, priority)
  if priority == '0' then return string.format('%d', n) end
  return string.format('%d', n) .. ':' .. priority
end
