-- KEYS: bucket. ARGV: at (when the request went on for its host), counted (when the bucket
-- counted it sent), rate, burst, recovery.
-- A request that took its token (take.lua) went on later than the bucket counted it sent (the
-- worker stalled between the send gate and the downloader): the bucket counts it sent at
-- ``at``, without the tokens it gained meanwhile, so the host's next token comes one interval
-- after it, whichever worker asks. Returns 1 when the bucket moved, else 0.
local at, counted = tonumber(ARGV[1]), tonumber(ARGV[2])
local rate, burst, recovery = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local tokens, factor, planned, pts, ts = bucket_read(KEYS[1], rate, burst, at, recovery)
if at <= ts then return 0 end
tokens = math.max(0, tokens - (at - counted) * rate * factor)
bucket_write(KEYS[1], tokens, factor, planned, pts, rate, burst, at, recovery)
return 1
