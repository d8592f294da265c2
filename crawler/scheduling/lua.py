"""Lua scripts of the frontier: every multi-key change is one atomic script, one round trip.

All keys a script touches share the spider's hash tag, so the scripts run on Redis Cluster.
Request records live in three hashes keyed by request id: ``data`` (the JSON), ``prio`` (its
queue score) and ``owner`` (the worker holding its lease, while leased).
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

# KEYS: queue, data, prio, seq, delayed, dupefilter base
# ARGV: mode, capacity, error_rate, then per request 7 values:
#       fingerprint hex, h1, h2, dont_filter (0/1), priority score part, due (0 = now), json
# Returns one 0/1 per request: 1 scheduled, 0 filtered as a duplicate.
SCHEDULE = (
    _DUPEFILTER
    + r"""
local mode, capacity, error_rate = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local results = {}
local n = (#ARGV - 3) / 7
local seq = redis.call('INCRBY', KEYS[4], n) - n
for r = 0, n - 1 do
  local a = 3 + r * 7
  local fp, h1, h2, dont_filter = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local priority, due, json = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), ARGV[a + 7]
  local seen = false
  if dont_filter ~= '1' then
    seen = seen_or_add(mode, KEYS[6], fp, h1, h2, capacity, error_rate)
  end
  if seen then
    results[#results + 1] = 0
  else
    seq = seq + 1
    local id = string.format('%d', seq)
    local score = priority + seq
    redis.call('HSET', KEYS[2], id, json)
    redis.call('HSET', KEYS[3], id, string.format('%.17g', score))
    if due > 0 then
      redis.call('ZADD', KEYS[5], due, id)
    else
      redis.call('ZADD', KEYS[1], score, id)
    end
    results[#results + 1] = 1
  end
end
return results
"""
)

# KEYS: queue, leases, owner, delayed, prio, data
# ARGV: now, count, lease deadline, worker
# Moves due delayed requests and expired leases back to the queue, then leases up to ``count``
# requests to ``worker``. Returns {promoted, reclaimed, queue size, id1, json1, id2, json2, ...}.
POP = r"""
local now, count, deadline, worker = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local function requeue(ids)
  for _, id in ipairs(ids) do
    local score = redis.call('HGET', KEYS[5], id)
    if score then redis.call('ZADD', KEYS[1], score, id) end
  end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  requeue(due)
  redis.call('ZREM', KEYS[4], unpack(due))
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
if #expired > 0 then
  requeue(expired)
  redis.call('ZREM', KEYS[2], unpack(expired))
  redis.call('HDEL', KEYS[3], unpack(expired))
end
local result = {#due, #expired, 0}
if count > 0 then
  local ids = redis.call('ZRANGE', KEYS[1], 0, count - 1)
  if #ids > 0 then
    redis.call('ZREM', KEYS[1], unpack(ids))
    for _, id in ipairs(ids) do
      redis.call('ZADD', KEYS[2], deadline, id)
      redis.call('HSET', KEYS[3], id, worker)
      result[#result + 1] = id
      result[#result + 1] = redis.call('HGET', KEYS[6], id) or ''
    end
  end
end
result[3] = redis.call('ZCARD', KEYS[1])
return result
"""

# KEYS: queue, leases, owner, data, prio, dead
# ARGV: worker, lease deadline (for renewals), then ops as triples (op, id, payload):
#   a = ack (done), r = release (back to the queue), n = renew the lease,
#   d = dead letter (payload: JSON object describing why, stored with the request).
# An op applies only while ``worker`` still owns the lease. Returns the number of leases owned
# (an unknown op changes nothing).
SETTLE = r"""
local worker, deadline = ARGV[1], ARGV[2]
local applied = 0
local function forget(id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
end
for a = 3, #ARGV, 3 do
  local op, id, payload = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if redis.call('HGET', KEYS[3], id) == worker then
    applied = applied + 1
    if op == 'n' then
      redis.call('ZADD', KEYS[2], 'XX', deadline, id)
    elseif op == 'r' then
      forget(id)
      redis.call('ZADD', KEYS[1], redis.call('HGET', KEYS[5], id), id)
    elseif op == 'a' or op == 'd' then
      if op == 'd' then
        local request = redis.call('HGET', KEYS[4], id) or 'null'
        redis.call('LPUSH', KEYS[6], '{"request":' .. request .. ',"failure":' .. payload .. '}')
      end
      forget(id)
      redis.call('HDEL', KEYS[4], id)
      redis.call('HDEL', KEYS[5], id)
    end
  end
end
return applied
"""

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
