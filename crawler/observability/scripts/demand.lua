-- KEYS: (prelude), the last look, the leases. ARGV: (prefix), now, sample (queued records read
-- at most), the age (seconds) of a last look still good to answer with, then the pacing as
-- pop.lua takes it (bucket key prefix "" for none, identity, rate, burst, recovery, horizon,
-- scan budget, look-ahead, then (domain, rate) pairs).
-- What the queue allows, from its head: reads up to ``sample`` queued requests in pop order
-- (highest priority first) and returns {queued, leased, sampled, host1, count1, rate1, spare1,
-- ...} (leased: the requests the workers hold, counted in the same look):
-- for each host of the sample, its requests in the sample, its rate now in requests per second
-- (its ban factor applied; "0": unlimited) and the tokens its bucket has to spare now (not
-- promised to turns planned; "-1" when unlimited). A record whose host cannot be read counts
-- under the host "" (unlimited). The buckets are only read. The answer is kept (with its time,
-- for a minute) and given again to whoever asks while it is younger than the age given: a
-- fleet's workers asking every few seconds share one look.
local now, sample, fresh = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local last = redis.call('GET', KEYS[4])
if last and fresh > 0 then
  local at, answer = string.match(last, '^([^|]*)|(.*)$')
  if tonumber(at) and now - tonumber(at) < fresh then return cjson.decode(answer) end
end
local paced = read_pacing(5)
local counts, first, hosts, sampled = {}, {}, {}, 0
local index = 0
while sampled < sample do
  local top = redis.call('ZRANGE', Q.queues, index, index)
  if #top == 0 then break end
  local records = redis.call('LRANGE', Q.prefix .. top[1], 0, sample - sampled - 1)
  for _, record in ipairs(records) do
    local host = host_of(record) or ''
    if not counts[host] then
      counts[host], first[host] = 0, record
      hosts[#hosts + 1] = host
    end
    counts[host] = counts[host] + 1
  end
  sampled = sampled + #records
  index = index + 1
end
local result = {queued(), redis.call('ZCARD', KEYS[5]), sampled}
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
  result[#result + 1] = fmt(rate)
  result[#result + 1] = spare
end
redis.call('SET', KEYS[4], fmt(now) .. '|' .. cjson.encode(result), 'EX', 60)
return result
