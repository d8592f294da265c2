-- KEYS, ARGV: (prelude). Returns how many requests are queued.

return queued()
