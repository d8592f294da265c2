-- Politeness in the pop (``Frontier.pop`` with a ``Pacing``): each queued request takes its
-- host's token from the host's bucket, ``<buckets><host>|<identity>`` (the hash the ban
-- middleware's token bucket keeps: tokens, ts, factor; its rate halved after a ban). A request
-- whose host has a token is leased; one whose host has none is given the host's next free turn
-- in the delayed set (its id ends in "|s", its token taken: the bucket runs into debt), and is
-- leased as soon as that turn comes; one whose turn lies beyond the horizon goes to the back of
-- its list. So a worker is handed only requests it may send now, and a host without tokens is
-- skipped, not waited on. A request's host is read from its record's URL, its Crawl-delay from
-- meta ``crawl_delay`` (one request per delay, no burst); a record whose host cannot be read
-- (older formats) is leased unpaced.
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
  P.budget, P.ahead = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  P.rates = {}
  for i = a + 8, #ARGV, 2 do P.rates[ARGV[i]] = tonumber(ARGV[i + 1]) end
  return P.buckets ~= ''
end
