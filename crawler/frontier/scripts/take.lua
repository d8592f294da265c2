-- KEYS: bucket [, bans hash]. ARGV: now, rate (tokens/s at factor 1), burst, want, recovery
-- (factor/s), floor (lowest factor), penalize (1 after a ban), and optionally an allowance
-- (seconds): requests granted now may reach the host up to that much later (a connection to
-- open first), so the bucket counts them as sent then; and optionally ``plan`` (1, for the
-- send gate's requests, each with a turn the pop planned): a request refused moves its turn to
-- the host's first one not planned yet, its wait until then (the count of turns planned kept).
-- Takes up to ``want`` tokens of the bucket (see bucket.lua) for requests sent now; each is one
-- of the turns planned, if any.
-- Returns {granted, wait seconds, factor [, the bans hash as a flat list]}: the wait is until
-- the side's next token (0 while one is left), also after a grant. The bans hash rides along so
-- the cool-downs cost no call of their own while tokens are taken.
local now, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, want = tonumber(ARGV[3]), tonumber(ARGV[4])
local recovery, floor, penalize = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local tokens, factor, planned, pts, ts = bucket_read(KEYS[1], rate, burst, now, recovery)
if want == 1 and ARGV[9] == '1' and not KEYS[2] then
  local interval = 1 / (rate * factor)
  if tokens < 1 and (1 - tokens) * interval > 0.001 then
    local at = math.max(now, ts) + (1 - tokens) * interval
    if planned > 1 then at = math.max(at, pts + interval) end
    bucket_write(KEYS[1], tokens, factor, math.max(planned, 1), math.max(pts, at), rate, burst,
      math.max(now, ts), recovery)
    return {0, fmt(math.max(0.001, at - now)), fmt(factor)}
  end
end
if penalize then factor = math.max(floor, factor / 2) end
-- A token due within EARLY seconds counts as come (the times are written to the microsecond:
-- a turn planned for the token's very time would otherwise miss it by a rounding).
local EARLY = 0.001
local granted, wait = 0, 0
if tokens < 1 and (1 - tokens) / (rate * factor) <= EARLY then tokens = 1 end
if tokens >= 1 then
  granted = math.min(want, math.floor(tokens))
  tokens = tokens - granted
end
if tokens < 1 then wait = math.max(0, ts - now) + (1 - tokens) / (rate * factor) end
planned = math.max(0, planned - granted)
local sent = math.max(now, ts)
if granted > 0 then
  sent = math.max(sent, now + (tonumber(ARGV[8]) or 0))
  wait = wait + sent - now
end
bucket_write(KEYS[1], tokens, factor, planned, pts, rate, burst, sent, recovery)
local reply = {granted, fmt(wait), fmt(factor)}
if KEYS[2] then reply[4] = redis.call('HGETALL', KEYS[2]) end
return reply
