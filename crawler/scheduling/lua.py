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
  local own = string.match(id, '^%d+:(-?%d+)')
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

# Politeness in the pop (``Frontier.pop`` with a ``Pacing``): each queued request takes its
# host's token from the host's bucket, ``<buckets><host>|<identity>`` (the hash the ban
# middleware's token bucket keeps: tokens, ts, factor; its rate halved after a ban). A request
# whose host has a token is leased; one whose host has none is given the host's next free turn
# in the delayed set (its id ends in "|s", its token taken: the bucket runs into debt), and is
# leased as soon as that turn comes; one whose turn lies beyond the horizon goes to the back of
# its list. So a worker is handed only requests it may send now, and a host without tokens is
# skipped, not waited on. A request's host is read from its record's URL, its Crawl-delay from
# meta ``crawl_delay`` (one request per delay, no burst); a record whose host cannot be read
# (older formats) is leased unpaced.
_PACE = r"""
local P = {}
local function fmt(x) return string.format('%.6f', x) end

local function host_of(record)
  local url = string.match(record, '^{"u":"([^"]*)"') or string.match(record, '^{"url":"([^"]*)"')
  if not url then return nil end
  local authority = string.match(url, '^[hH][tT][tT][pP][sS]?://([^/?#\\]+)')
  if not authority then return nil end
  authority = string.match(authority, '([^@]*)$')
  local host = string.match(authority, '^%[([^%]]*)%]') or string.match(authority, '^([^:]*)')
  if host == nil or host == '' then return nil end
  return string.lower(host)
end

-- Requests per second for a record of ``host`` and the bucket's burst (0: unlimited).
local function rate_of(host, record)
  local rate = P.rates[host] or P.rate
  local delay = tonumber(string.match(record, '"crawl_delay":(%d[%d%.eE+-]*)'))
  if delay and delay > 0 then
    if rate > 0 then return math.min(rate, 1 / delay), 1 end
    return 1 / delay, 1
  end
  return rate, P.burst
end

-- Takes a token of ``host``'s bucket; returns when the request may go (``now`` when a token
-- was left), or nil, taking nothing, when that is more than the horizon away (the host is then
-- not asked again in this call).
local BEYOND = {}
local function reserve(host, rate, burst, now)
  if BEYOND[host] then return nil end
  local key = P.buckets .. host .. '|' .. P.identity
  local state = redis.call('HMGET', key, 'tokens', 'ts', 'factor')
  local ts = tonumber(state[2]) or now
  local elapsed = math.max(0, now - ts)
  local factor = math.min(1, (tonumber(state[3]) or 1) + elapsed * P.recovery)
  local current = rate * factor
  local tokens = math.min(burst, (tonumber(state[1]) or burst) + elapsed * current)
  local at = now
  if tokens < 1 then at = now + (1 - tokens) / current end
  if at - now > P.horizon then
    BEYOND[host] = true
    return nil
  end
  tokens = tokens - 1
  redis.call('HSET', key, 'tokens', fmt(tokens), 'ts', fmt(now), 'factor', fmt(factor))
  -- The bucket is forgotten once it is full again at its full rate: absent means just that.
  local full = (burst - tokens) / current
  if P.recovery > 0 then full = math.max(full, (1 - factor) / P.recovery) end
  redis.call('EXPIRE', key, math.ceil(math.min(full, 86400)) + 1)
  return at
end

local function read_pacing(a)
  P.buckets, P.identity = ARGV[a], ARGV[a + 1]
  P.rate, P.burst = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  P.recovery, P.horizon = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  P.budget = tonumber(ARGV[a + 6])
  P.rates = {}
  for i = a + 7, #ARGV, 2 do P.rates[ARGV[i]] = tonumber(ARGV[i + 1]) end
  return P.buckets ~= ''
end
"""

# KEYS: (prelude), delayed, leases, owner
# ARGV: (prefix), now, count, lease deadline, worker, then pacing: bucket key prefix ("" for
# none), identity, rate (0 = unlimited), burst, recovery (factor/s), horizon (s), scan budget,
# then (domain, rate) pairs.
# Moves due delayed requests and expired leases back to the queue (paced ones whose turn has
# come are leased as they are), then leases up to ``count`` requests to ``worker``. Returns
# {promoted, reclaimed, queue size, next due (the earliest due time left in the delayed set,
# "0" when it is empty), paced flags (one "1"/"0" per leased request: its token taken here),
# 1 when the scan budget ran out before the queue while requests were still being placed (else
# 0), id1, json1, id2, json2, ...}.
POP = (
    _PRELUDE
    + _PACE
    + r"""
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
