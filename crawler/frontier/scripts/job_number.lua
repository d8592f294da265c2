-- KEYS: the spider's jobs hash, the job's state hash, the paused jobs (set)
-- ARGV: job id, now, seconds the state is kept (JOB_TTL)
-- The job's number, given the next one the first time the id is seen (or once the job was
-- forgotten). A job without a state (new, or one whose state expired and that was not
-- forgotten yet: it goes on under its number) gets ``started``, and a TTL unless it is paused.
-- Returns the number.
local number = redis.call('HGET', KEYS[1], ARGV[1])
if not number then
  number = redis.call('HINCRBY', KEYS[1], ':seq', 1)
  redis.call('HSET', KEYS[1], ARGV[1], number, '#' .. number, ARGV[1])
end
if redis.call('HSETNX', KEYS[2], 'started', ARGV[2]) == 1
    and redis.call('SISMEMBER', KEYS[3], number) == 0 then
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return tonumber(number)
