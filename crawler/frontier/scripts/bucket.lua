-- One token bucket per (host, identity), the hash ``<buckets><host>|<identity>``, kept by every
-- path that paces a host: the pop and the turns taken ahead plan with it, the send gate and
-- the ban middleware take its tokens.
--   tokens, ts     the requests sent: ``rate`` tokens a second times ``factor``, at most
--                  ``burst``, never in debt, as of ``ts`` (which may lie ahead: a request
--                  allowed time to open a connection counts as sent then); a request leaves a
--                  worker only with one of them (take.lua), so none reaches its host sooner
--                  than its rate allows, however late it was sent;
--   planned, pts   the turns handed out and not sent yet, and the latest of their times: a new
--                  turn comes when the tokens would cover it and every turn before it. Turns
--                  still counted a whole interval after the latest one's time were not sent
--                  (their worker died, the request went back): they are forgotten;
--   factor, fts    the host's share of its rate after bans (halved by a ban, recovering by
--                  ``recovery`` a second), and when it was written.
local function fmt(x) return string.format('%.6f', x) end

-- The bucket at ``now``: its tokens, factor, and the turns planned and not sent (and when the
-- latest is).
local function bucket_read(key, rate, burst, now, recovery)
  local s = redis.call('HMGET', key, 'tokens', 'ts', 'factor', 'fts', 'planned', 'pts')
  local ts = tonumber(s[2]) or now
  local fts = tonumber(s[4]) or ts
  local factor = math.min(1, (tonumber(s[3]) or 1) + math.max(0, now - fts) * recovery)
  local tokens = tonumber(s[1]) or burst
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate * factor)
  local planned, pts = tonumber(s[5]) or 0, tonumber(s[6]) or 0
  if planned > 0 and now > pts + 1 / (rate * factor) then planned = 0 end
  return tokens, factor, planned, pts, ts
end

-- Writes the bucket as of ``now``. It is forgotten once it would be full again at the full
-- rate with no turn planned (an absent bucket means just that); a factor that never recovers
-- (``recovery`` 0) is kept a day.
local function bucket_write(key, tokens, factor, planned, pts, rate, burst, now, recovery)
  redis.call('HSET', key, 'tokens', fmt(tokens), 'ts', fmt(now), 'factor', fmt(factor), 'fts',
    fmt(now), 'planned', planned, 'pts', fmt(pts))
  local interval = 1 / (rate * factor)
  local full = math.max((burst - tokens) * interval, pts - now + interval)
  if factor < 1 then
    if recovery > 0 then full = math.max(full, (1 - factor) / recovery) else full = 86400 end
  end
  redis.call('EXPIRE', key, math.ceil(math.min(full, 86400)) + 1)
end

-- Plans the next turn of the bucket: ``now`` while its tokens cover every turn planned and this
-- one, else one interval after the latest turn planned (the first one when its next token
-- comes); nil, planning nothing, when that is more than ``horizon`` seconds away.
local function bucket_plan(key, rate, burst, now, recovery, horizon)
  local tokens, factor, planned, pts, ts = bucket_read(key, rate, burst, now, recovery)
  local interval = 1 / (rate * factor)
  -- A request granted with an allowance counts as sent later than now (see take.lua).
  local at = math.max(now, ts)
  if planned == 0 then
    at = at + math.max(0, 1 - tokens) * interval
  elseif planned + 1 > math.floor(tokens) then
    at = math.max(at, pts + interval)  -- one interval after the latest turn planned
  end
  if at - now > horizon + 1e-6 then return nil end
  bucket_write(key, tokens, factor, planned + 1, math.max(pts, at), rate, burst,
    math.max(now, ts), recovery)
  return at
end
