-- KEYS: (prelude), paused jobs; ARGV: (prelude). Returns how many requests are queued, those
-- of paused jobs parked included.

Q.paused = KEYS[6]
return queued(true)
