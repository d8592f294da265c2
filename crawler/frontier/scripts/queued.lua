-- KEYS: (prelude), paused jobs; ARGV: (prelude). Returns how many requests are queued, those
-- of paused jobs parked included.

Q.paused = KEYS[4]
return queued(true)
