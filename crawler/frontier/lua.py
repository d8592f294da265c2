"""Lua scripts of the frontier: every multi-key change is one atomic script, one round trip.

All keys a script touches share the spider's hash tag, so the scripts run on Redis Cluster.
Queued requests wait in one list per priority (see ``_QUEUE``); a leased or delayed one has its
record in the ``data`` hash under its id, and a leased one its worker in the ``owner`` hash.
"""

from __future__ import annotations

# Duplicate filter, shared by SCHEDULE. mode: "bloom" (bitmaps below), "redisbloom" (BF.ADD),
# "exact" (a set of fingerprints) or "none".
#
# The scalable Bloom filter is a chain of bitmaps {base}:0, {base}:1, ...; filter j holds
# capacity * 2^j items at error rate p/2 * (1/2)^j, so the chain's total stays below p however
# far it grows. Positions come from enhanced double hashing of two 32-bit halves of the
# request fingerprint (h1, h2), computed by the client.
_DUPEFILTER = r"""
local LN2SQ = math.log(2) * math.log(2)
local MAX_BITS = 4294967295

-- Shapes (bits, hashes, items) of filter j, computed once per script call from the capacity
-- and error rate the filter chain was created with.
local SHAPES = {}
local function bloom_shape(meta, j)
  if SHAPES[j] == nil then
    local created = redis.call('HMGET', meta, 'capacity', 'error_rate')
    local capacity, p = tonumber(created[1]), tonumber(created[2]) / 2 * (0.5 ^ j)
    local bits_per_item = -math.log(p) / LN2SQ
    local items = math.min(capacity * (2 ^ j), math.floor(MAX_BITS / bits_per_item))
    local k = math.ceil(-math.log(p) / math.log(2))
    SHAPES[j] = {math.ceil(items * bits_per_item), k, items}
  end
  return SHAPES[j][1], SHAPES[j][2], SHAPES[j][3]
end

local function bloom_args(h1, h2, k, m, op)
  local args = {}
  for i = 0, k - 1 do
    local pos = (h1 + i * h2 + (i * i * i - i) / 6) % m
    args[#args + 1] = op
    args[#args + 1] = 'u1'
    args[#args + 1] = string.format('%d', pos)
    if op == 'SET' then args[#args + 1] = 1 end
  end
  return args
end

local function bloom_seen_or_add(base, h1, h2, capacity, error_rate)
  local meta = base .. ':meta'
  if redis.call('EXISTS', meta) == 0 then
    redis.call('HSET', meta, 'capacity', capacity, 'error_rate', error_rate, 'filters', 1,
               'count:0', 0)
  end
  local filters = tonumber(redis.call('HGET', meta, 'filters'))
  for j = 0, filters - 1 do
    local m, k = bloom_shape(meta, j)
    local bits = redis.call('BITFIELD', base .. ':' .. j, unpack(bloom_args(h1, h2, k, m, 'GET')))
    local all = true
    for _, bit in ipairs(bits) do
      if bit == 0 then all = false break end
    end
    if all then return true end
  end
  local last = filters - 1
  local m, k, items = bloom_shape(meta, last)
  local bitmap = base .. ':' .. last
  if redis.call('STRLEN', bitmap) == 0 then
    -- Allocate the whole bitmap with its first item: a string grown by setting ever higher
    -- bits is over-allocated (up to twice its length) and keeps that memory.
    redis.call('SETBIT', bitmap, string.format('%d', m - 1), 0)
  end
  redis.call('BITFIELD', bitmap, unpack(bloom_args(h1, h2, k, m, 'SET')))
  local count = redis.call('HINCRBY', meta, 'count:' .. last, 1)
  if count >= items then
    redis.call('HSET', meta, 'filters', filters + 1, 'count:' .. filters, 0)
  end
  return false
end

local RESERVED = {}
local function seen_or_add(mode, base, fp, h1, h2, capacity, error_rate)
  if mode == 'bloom' then
    return bloom_seen_or_add(base, tonumber(h1), tonumber(h2), capacity, error_rate)
  elseif mode == 'redisbloom' then
    -- BF.ADD alone would create a filter of RedisBloom's defaults (100 items at 1%): reserve
    -- it with the configured capacity and error rate first (it scales by 2 past capacity).
    if not RESERVED[base] then
      if redis.call('EXISTS', base) == 0 then
        redis.call('BF.RESERVE', base, string.format('%.17g', error_rate), capacity)
      end
      RESERVED[base] = true
    end
    return redis.call('BF.ADD', base, fp) == 0
  elseif mode == 'exact' then
    return redis.call('SADD', base, fp) == 0
  end
  return false
end
"""

# The queue: one list per priority, ``{spider}:queue:<priority>``, holding the records
# themselves (a list packs its elements a few bytes apart), and the sorted set
# ``{spider}:queues`` of the priorities with a list, scored -priority so the highest comes
# first. A request gets its id when it leaves the queue (leased) or is delayed; its priority
# rides in the id ("<n>" for priority 0, "<n>:<priority>" otherwise), so it finds its list
# again. A record outside the queue (leased, delayed) waits in the ``data`` hash under its id.
#
# Older frontiers kept every request in the ``queue`` sorted set (score -priority * 1e13 + n)
# with its score in the ``prio`` hash and its record in ``data``: POP moves such entries to the
# lists (up to 1000 per call), and a leased or delayed entry of theirs finds its priority in
# ``prio``, so a fleet can upgrade while a crawl runs.
#
# Every script sets Q (keys and list prefix) before calling these.
_QUEUE = r"""
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

local OLD_STEP = 1e13
local function legacy_priority(score)
  return string.format('%d', -math.floor(tonumber(score) / OLD_STEP))
end

local function priority_of(id)
  local score = redis.call('HGET', Q.legacy_prio, id)
  if score then redis.call('HDEL', Q.legacy_prio, id) end
  local own = string.match(id, '^%d+:(-?%d+)$')
  if own then return own end
  if score then return legacy_priority(score) end
  return '0'
end

-- A delayed or leased id also gets its score of the older layout in ``prio``: a worker still
-- running the older POP requeues a due or expired id only when it finds it there (and drops it
-- from ``delayed``/``leases`` either way), so without it a rolling upgrade loses requests.
-- Whoever settles or requeues the id deletes the entry.
local function mark_legacy(id, n, priority)
  local clamped = math.max(-400, math.min(400, tonumber(priority)))
  redis.call('HSET', Q.legacy_prio, id, string.format('%d', -clamped * OLD_STEP + n))
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

local function migrate_legacy()
  if redis.call('EXISTS', Q.legacy_queue) == 0 then return end
  local old = redis.call('ZRANGE', Q.legacy_queue, 0, 999, 'WITHSCORES')
  local ids = {}
  for i = 1, #old, 2 do
    local id = old[i]
    ids[#ids + 1] = id
    local record = redis.call('HGET', Q.data, id)
    redis.call('HDEL', Q.data, id)
    redis.call('HDEL', Q.legacy_prio, id)
    if record then push(legacy_priority(old[i + 1]), record, false) end
  end
  redis.call('ZREM', Q.legacy_queue, unpack(ids))
end

local function queued()
  local total = redis.call('ZCARD', Q.legacy_queue)
  for _, priority in ipairs(redis.call('ZRANGE', Q.queues, 0, -1)) do
    total = total + redis.call('LLEN', Q.prefix .. priority)
  end
  return total
end
"""


# Every frontier script begins with the same five keys and the queue lists' prefix:
# KEYS: queues, data, legacy queue, legacy prio, seq; ARGV[1]: "{spider}:queue:".
_PRELUDE = (
    _QUEUE
    + r"""
Q.queues, Q.data, Q.legacy_queue, Q.legacy_prio, Q.seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5]
Q.prefix = ARGV[1]
local function new_id(n, priority)
  if priority == '0' then return string.format('%d', n) end
  return string.format('%d', n) .. ':' .. priority
end
"""
)

# KEYS: (prelude), delayed, dupefilter base
# ARGV: (prefix), mode, capacity, error_rate, then per request 7 values:
#       fingerprint hex, h1, h2, dont_filter (0/1), priority (integer), due (0 = now), json
# Returns one 0/1 per request: 1 scheduled, 0 filtered as a duplicate.
SCHEDULE = (
    _DUPEFILTER
    + _PRELUDE
    + r"""
local mode, capacity, error_rate = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local results = {}
for a = 5, #ARGV, 7 do
  local fp, h1, h2, dont_filter = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local priority, due, json = ARGV[a + 4], tonumber(ARGV[a + 5]), ARGV[a + 6]
  local seen = false
  if dont_filter ~= '1' then
    seen = seen_or_add(mode, KEYS[7], fp, h1, h2, capacity, error_rate)
  end
  if seen then
    results[#results + 1] = 0
  else
    if due > 0 then
      local id = new_id(redis.call('INCR', Q.seq), priority)
      redis.call('HSET', Q.data, id, json)
      redis.call('ZADD', KEYS[6], due, id)
      mark_legacy(id, seq_of(id), priority)
    else
      push(priority, json, false)
    end
    results[#results + 1] = 1
  end
end
return results
"""
)

# KEYS: (prelude), delayed, leases, owner
# ARGV: (prefix), now, count, lease deadline, worker
# Moves due delayed requests and expired leases back to the queue, then leases up to ``count``
# requests to ``worker``. Returns {promoted, reclaimed, queue size, next due (the earliest due
# time left in the delayed set, "0" when it is empty), id1, json1, id2, json2, ...}.
POP = (
    _PRELUDE
    + r"""
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
"""
)

# KEYS: (prelude), leases, owner, dead
# ARGV: (prefix), worker, lease deadline (for renewals), then ops as triples (op, id, payload):
#   a = ack (done), r = release (back to the queue), n = renew the lease,
#   d = dead letter (payload: JSON object describing why, stored with the request).
# An op applies only while ``worker`` still owns the lease. Returns the number of leases owned
# (an unknown op changes nothing).
SETTLE = (
    _PRELUDE
    + r"""
local worker, deadline = ARGV[2], ARGV[3]
local applied = 0
local released = {}
local function forget(id)
  redis.call('ZREM', KEYS[6], id)
  redis.call('HDEL', KEYS[7], id)
end
for a = 4, #ARGV, 3 do
  local op, id, payload = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if redis.call('HGET', KEYS[7], id) == worker then
    applied = applied + 1
    if op == 'n' then
      redis.call('ZADD', KEYS[6], 'XX', deadline, id)
    elseif op == 'r' then
      forget(id)
      released[#released + 1] = id
    elseif op == 'a' or op == 'd' then
      if op == 'd' then
        local request = redis.call('HGET', Q.data, id) or 'null'
        redis.call('LPUSH', KEYS[8], '{"request":' .. request .. ',"failure":' .. payload .. '}')
      end
      forget(id)
      redis.call('HDEL', Q.data, id)
      redis.call('HDEL', Q.legacy_prio, id)
    end
  end
end
requeue(released)
return applied
"""
)

# KEYS, ARGV: (prelude). Returns how many requests are queued.
QUEUED = (
    _PRELUDE
    + r"""
return queued()
"""
)

# KEYS: start list (``<spider>:start_urls``), its leases (``{<spider>:start_urls}:leases``)
# ARGV: now, count, lease deadline, worker
# Puts start entries whose lease expired back at the list's consuming end, then leases up to
# ``count`` entries. A lease member is "<worker>:<time>:<n>\n<entry>", unique even for equal
# entries. Returns the members.
POP_START = r"""
local now, count, deadline, worker = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
for _, member in ipairs(expired) do
  local entry = string.sub(member, string.find(member, '\n', 1, true) + 1)
  redis.call('RPUSH', KEYS[1], entry)
end
if #expired > 0 then redis.call('ZREM', KEYS[2], unpack(expired)) end
local entries = redis.call('RPOP', KEYS[1], count)
local members = {}
if entries then
  for n, entry in ipairs(entries) do
    local member = worker .. ':' .. now .. ':' .. n .. '\n' .. entry
    redis.call('ZADD', KEYS[2], deadline, member)
    members[#members + 1] = member
  end
end
return members
"""
