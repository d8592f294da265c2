-- KEYS: the hosts' breaker states (a hash: host -> "level incident until"), their failures in a
-- row (a hash: "host|!mark" -> count), the cool-downs hash, the cool-down reasons hash
-- ARGV: host, now, sent (when the failed request went, Unix time), start, max, forgive (seconds),
-- jitter (a factor, >= 1), why, then for each mark the failure counts towards (none, one or
-- more): its field ("host|!mark") and the failures in a row that set it (0: never)
-- One failure of a host for the fleet's circuit breaker (crawler/bans/breaker.py). A failure of
-- a request that went before the host's current block ended belongs to that block's incident:
-- N requests in flight failing together advance the backoff by one step, not N. A new incident
-- blocks the host for start * 2^(level - 1) seconds (at most max), times the jitter; a host
-- quiet for ``forgive`` seconds after its last block starts again at the first step, its
-- failures forgotten. The block is the host's cool-down (the later end kept). Once a mark's
-- counted failures in a row reach its limit, the mark's field gets a cool-down of ``max`` seconds,
-- and the marks after it in ARGV are not counted: the first one reached wins.
-- Returns {until (a string), level, 1 when this one blocked, then each counted mark's failures in
-- a row, in the order given}.
local host, now, sent = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local start, most, forgive = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local jitter, why = tonumber(ARGV[7]), ARGV[8]
local function forget_failures(of)
  redis.call('HDEL', KEYS[2], of .. '|!host_unreachable', of .. '|!robots_unavailable')
end
local level, incident, ends = 0, 0, 0
local state = redis.call('HGET', KEYS[1], host)
if state then
  local fields = {}
  for value in string.gmatch(state, '%S+') do fields[#fields + 1] = tonumber(value) or 0 end
  level, incident, ends = fields[1] or 0, fields[2] or 0, fields[3] or 0
end
if now - ends > forgive then
  level = 0
  forget_failures(host)
end
local fresh = 0
if level == 0 or sent >= ends then
  level = math.min(level + 1, 64)
  ends = now + math.min(start * 2 ^ (level - 1), most) * jitter
  incident, fresh = now, 1
  local current = tonumber(redis.call('HGET', KEYS[3], host) or '0')
  if ends > current then
    redis.call('HSET', KEYS[3], host, string.format('%.3f', ends))
    redis.call('HSET', KEYS[4], host, why)
  end
end
redis.call('HSET', KEYS[1], host, string.format('%d %.3f %.3f', level, incident, ends))
local reply = {string.format('%.3f', ends), level, fresh}
for i = 9, #ARGV - 1, 2 do
  local counted, limit = ARGV[i], tonumber(ARGV[i + 1])
  local failures = redis.call('HINCRBY', KEYS[2], counted, 1)
  reply[#reply + 1] = failures
  if limit > 0 and failures >= limit then
    redis.call('HSET', KEYS[3], counted, string.format('%.3f', now + most))
    redis.call('HSET', KEYS[4], counted, string.format('%s (%d in a row)', why, failures))
    break
  end
end
-- States forgiven long ago are deleted, with their failures in a row, a few sampled per call.
local sampled = redis.call('HRANDFIELD', KEYS[1], 8, 'WITHVALUES')
for i = 1, #sampled, 2 do
  local last = tonumber(string.match(sampled[i + 1], '(%S+)$')) or 0
  if now - last > forgive then
    redis.call('HDEL', KEYS[1], sampled[i])
    forget_failures(sampled[i])
  end
end
return reply
