-- KEYS: the job's state hash, the paused jobs (set)
-- ARGV: the job's number, now, seconds the state is kept (JOB_TTL), then pairs (count, value)
-- Adds a worker's counts to the job's state and marks its last activity; the state is kept
-- JOB_TTL seconds from now, or for good while the job is paused (until it resumes).
for i = 4, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'last', ARGV[2])
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
