-- Politeness in the pop (``Frontier.pop`` with a ``Pacing``): each queued request is given a turn
-- of its host, planned with the host's bucket (``<buckets><host>|<identity>``, see bucket.lua;
-- its rate halved after a ban); the worker sends it only with one of the bucket's tokens (the
-- send gate, ``frontier/gate.py``). A request
-- whose host has a token is leased; one whose host has none is given the host's next free turn
-- in the delayed set (its id ends in "|s", the turn counted as planned), and is
-- leased as soon as that turn comes; one whose turn lies beyond the horizon goes to the back of
-- its list. So a worker is handed only requests it may send now, and a host without tokens is
-- skipped, not waited on. A request's host is read from its record's URL, its Crawl-delay from
-- meta ``crawl_delay`` (one request per delay, no burst); its URL is its record's first field (after
-- its job's number, codec.py); a record whose host cannot be read (older
-- formats) is leased unpaced.
local P = {}

local function host_of(record)
  local url = string.match(record, '^%d*{"u":"([^"]*)"') or string.match(record, '^{"j":%d+,"u":"([^"]*)"')
    or string.match(record, '^{"url":"([^"]*)"')
  if not url then return nil end
  local authority = string.match(url, '^[hH][tT][tT][pP][sS]?://([^/?#\\]+)')
  if not authority then return nil end
  authority = string.match(authority, '([^@]*)$')
  local host = string.match(authority, '^%[([^%]]*)%]') or string.match(authority, '^([^:]*)')
  if host == nil or host == '' then return nil end
  return string.lower(host)
end

-- The rate POLITENESS_DOMAIN_RATES gives ``host``: its own, else its nearest parent domain's
-- (``example.com`` covers ``www.example.com``); an IP address only its own. Else the default.
local function domain_rate(host)
  if P.rates[host] then return P.rates[host] end
  if string.find(host, ':', 1, true) or string.match(host, '^[%d.]+$') then return P.rate end
  local parent = string.match(host, '^[^.]*%.(.+)$')
  while parent do
    if P.rates[parent] then return P.rates[parent] end
    parent = string.match(parent, '^[^.]*%.(.+)$')
  end
  return P.rate
end

-- Requests per second for a record of ``host`` and the bucket's burst (0: unlimited).
local function rate_of(host, record)
  local rate = domain_rate(host)
  local delay = tonumber(string.match(record, '"crawl_delay":(%d[%d%.eE+-]*)'))
  if delay and delay > 0 then
    if rate > 0 then return math.min(rate, 1 / delay), 1 end
    return 1 / delay, 1
  end
  return rate, P.burst
end

-- Plans a turn of ``host``'s bucket; returns when the request may go (``now`` when a token is
-- free), or nil, planning nothing, when that is more than the horizon away (the host is then
-- not asked again in this call).
local BEYOND = {}
local function reserve(host, rate, burst, now)
  if BEYOND[host] then return nil end
  local key = P.buckets .. host .. '|' .. P.identity
  local at = bucket_plan(key, rate, burst, now, P.recovery, P.horizon)
  if at == nil then BEYOND[host] = true end
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
