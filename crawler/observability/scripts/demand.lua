-- KEYS: (prelude), the last look, the leases, the delayed set. ARGV: (prefix), now, sample
-- (queued records read at most, and as many delayed ones), the age (seconds) of a last look
-- still good to answer with, then the pacing as pop.lua takes it (bucket key prefix "" for none,
-- identity, rate, burst, recovery, horizon, scan budget, look-ahead, then (domain, rate) pairs).
-- What the work allows, from the heads of the queue and of the delayed set: reads up to
-- ``sample`` queued requests in pop order (highest priority first) and up to ``sample`` delayed
-- ones (retries, cool-downs and politeness turns, the soonest due first), and returns
-- {queued, leased, sampled, delayed, delayed sampled, host1, count1, delayed1, rate1, spare1,
-- ...} (leased: the requests the workers hold, counted in the same look): for each host of the
-- samples, its requests in the queue's sample and in the delayed set's, its rate now in
-- requests per second (its ban factor applied; "0": unlimited) and the tokens its bucket has to
-- spare now (not promised to turns planned; "-1" when unlimited). A record whose host cannot be
-- read counts under the host "" (unlimited). The buckets are only read. The answer is kept
-- (with its time, for a minute) and given again to whoever asks while it is younger than the
-- age given: a fleet's workers asking every few seconds share one look. It is kept as
-- "2:<time>|<answer>": an answer of the older shape (no delayed counts) is not read as one.
-- An age below 0 (a command's look, made with the command's settings) neither reads nor
-- keeps it: the workers' shared look is made with theirs.
local now, sample, fresh = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local last = redis.call('GET', KEYS[4])
if last and fresh > 0 then
  local at, answer = string.match(last, '^2:([^|]*)|(.*)$')
  if tonumber(at) and now - tonumber(at) < fresh then return cjson.decode(answer) end
end
local paced = read_pacing(5)
local counts, late, first, hosts = {}, {}, {}, {}

-- One record of the samples: counted for its host, in ``tally`` (the queue's or the delayed).
local function count(record, tally)
  local host = host_of(record) or ''
  if not first[host] then
    counts[host], late[host], first[host] = 0, 0, record
    hosts[#hosts + 1] = host
  end
  tally[host] = tally[host] + 1
end

local sampled, index = 0, 0
while sampled < sample do
  local top = redis.call('ZRANGE', Q.queues, index, index)
  if #top == 0 then break end
  local records = redis.call('LRANGE', Q.prefix .. top[1], 0, sample - sampled - 1)
  for _, record in ipairs(records) do count(record, counts) end
  sampled = sampled + #records
  index = index + 1
end
local delayed_sampled = 0
local ids = redis.call('ZRANGE', KEYS[6], 0, sample - 1)
for at = 1, #ids, 500 do  -- records read 500 at a time (unpack's limit)
  local some = {unpack(ids, at, math.min(at + 499, #ids))}
  for _, record in ipairs(redis.call('HMGET', Q.data, unpack(some))) do
    if record then
      count(record, late)
      delayed_sampled = delayed_sampled + 1
    end
  end
end
local result = {queued(), redis.call('ZCARD', KEYS[5]), sampled, redis.call('ZCARD', KEYS[6]),
  delayed_sampled}
for _, host in ipairs(hosts) do
  local rate, burst, spare = 0, 1, -1
  if paced and host ~= '' then rate, burst = rate_of(host, first[host]) end
  if rate > 0 then
    local key = P.buckets .. host .. '|' .. P.identity
    local tokens, factor, planned = bucket_read(key, rate, burst, now, P.recovery)
    rate, spare = rate * factor, math.max(0, math.floor(tokens) - planned)
  end
  result[#result + 1] = host
  result[#result + 1] = counts[host]
  result[#result + 1] = late[host]
  result[#result + 1] = fmt(rate)
  result[#result + 1] = spare
end
if fresh >= 0 then
  redis.call('SET', KEYS[4], '2:' .. fmt(now) .. '|' .. cjson.encode(result), 'EX', 60)
end
return result
