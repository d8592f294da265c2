-- KEYS: (prelude)
-- ARGV: (prefix), now, turns (at most, per host), host count, hosts..., then pacing as POP
-- takes it (see pace.lua's read_pacing).
-- Turns of a host taken ahead for the requests a worker's own pages will make there (the next
-- page of a feed): each host's token bucket plans up to ``turns`` of its turns due within the
-- look-ahead (as a pop's delayed turns are), with as many ids of the queue's sequence. The
-- worker holds a request it makes for that host until such a turn, then sends it with the
-- bucket's token (the send gate), and writes it as leased to itself with its next round trip.
-- Returns, per host asked, {host, first sequence number, rate, "t1,t2,..." (Unix times)}; no
-- turn for a host whose rate is unlimited or whose next turn lies beyond the look-ahead.
local now, most, hosts = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
read_pacing(5 + hosts)
P.horizon = P.ahead
local result = {}
for i = 1, hosts do
  local host = ARGV[4 + i]
  local rate, burst = domain_rate(host), P.burst
  local times = {}
  while rate > 0 and #times < most do
    local at = reserve(host, rate, burst, now)
    if at == nil then break end
    times[#times + 1] = fmt(at)
  end
  if #times > 0 then
    local first = redis.call('INCRBY', Q.seq, #times) - #times + 1
    result[#result + 1] = {host, first, fmt(rate), table.concat(times, ',')}
  end
end
return result
