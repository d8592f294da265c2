-- Duplicate filter, shared by SCHEDULE. mode: "bloom" (bitmaps below), "redisbloom" (BF.ADD),
-- "exact" (a set of fingerprints) or "none".
--
-- The scalable Bloom filter is a chain of bitmaps {base}:0, {base}:1, ...; filter j holds
-- capacity * 2^j items at error rate p/2 * (1/2)^j, so the chain's total stays below p however
-- far it grows. Positions come from enhanced double hashing of two 32-bit halves of the
-- request fingerprint (h1, h2), computed by the client.
--
-- A request that carries a depth (its number of links from a start URL: the links spider's) is
-- a duplicate only if its URL was scheduled at that depth or less, so a URL found again by a
-- shorter path passes. The plain filter is depth 0's: a URL scheduled at depth 0, without a
-- depth, or before depths were kept is a duplicate at any depth. "exact" keeps the others in
-- a hash {base}:depth, fingerprint -> least depth. "bloom" keeps one more chain per depth
-- t >= 1, bitmaps {base}:d<t>:0, :1, ..., of the URLs scheduled at depth t (and none less
-- then), its length and counts in {base}:meta under "d<t>:": a request at depth d is a
-- duplicate iff a chain of depth 0..d has its URL (each has its own error rate: d + 1 times p
-- at most in all), else it goes into depth d's chain. "redisbloom" and "none" ignore depths.

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

-- The chain of depth t: its bitmaps' and meta fields' prefix ('' for the plain chain, t = 0).
local function chain_of(t)
  if t == 0 then return '' end
  return 'd' .. t .. ':'
end

local function bloom_seen_or_add(base, h1, h2, capacity, error_rate, depth)
  local meta = base .. ':meta'
  local lengths = {}
  for t = 0, depth or 0 do lengths[#lengths + 1] = chain_of(t) .. 'filters' end
  lengths = redis.call('HMGET', meta, unpack(lengths))
  for t = 0, #lengths - 1 do
    for j = 0, (tonumber(lengths[t + 1]) or 0) - 1 do
      local m, k = bloom_shape(meta, j)
      local bitmap = base .. ':' .. chain_of(t) .. j
      local bits = redis.call('BITFIELD', bitmap, unpack(bloom_args(h1, h2, k, m, 'GET')))
      local all = true
      for _, bit in ipairs(bits) do
        if bit == 0 then all = false break end
      end
      if all then return true end
    end
  end
  local chain = chain_of(depth or 0)
  local filters = tonumber(lengths[#lengths])
  if not filters then
    -- The chains share the capacity and error rate of the first one.
    redis.call('HSETNX', meta, 'capacity', capacity)
    redis.call('HSETNX', meta, 'error_rate', error_rate)
    redis.call('HSET', meta, chain .. 'filters', 1, 'count:' .. chain .. '0', 0)
    filters = 1
  end
  local last = filters - 1
  local m, k, items = bloom_shape(meta, last)
  local bitmap = base .. ':' .. chain .. last
  if redis.call('STRLEN', bitmap) == 0 then
    -- Allocate the whole bitmap with its first item: a string grown by setting ever higher
    -- bits is over-allocated (up to twice its length) and keeps that memory.
    redis.call('SETBIT', bitmap, string.format('%d', m - 1), 0)
  end
  redis.call('BITFIELD', bitmap, unpack(bloom_args(h1, h2, k, m, 'SET')))
  local count = redis.call('HINCRBY', meta, 'count:' .. chain .. last, 1)
  if count >= items then
    redis.call('HSET', meta, chain .. 'filters', filters + 1, 'count:' .. chain .. filters, 0)
  end
  return false
end

local function exact_seen_or_add(base, fp, depth)
  if (depth or 0) == 0 then return redis.call('SADD', base, fp) == 0 end
  if redis.call('SISMEMBER', base, fp) == 1 then return true end
  local depths = base .. ':depth'
  local least = redis.call('HGET', depths, fp)
  if least and tonumber(least) <= depth then return true end
  redis.call('HSET', depths, fp, depth)
  return false
end

local RESERVED = {}
local function seen_or_add(mode, base, fp, h1, h2, capacity, error_rate, depth)
  if mode == 'bloom' then
    return bloom_seen_or_add(base, tonumber(h1), tonumber(h2), capacity, error_rate, depth)
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
    return exact_seen_or_add(base, fp, depth)
  end
  return false
end
