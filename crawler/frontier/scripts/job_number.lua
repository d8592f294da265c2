-- KEYS: the spider's jobs hash, the job's state hash
-- ARGV: job id, now
-- The job's number, given the next one the first time the job is seen (its state then gets
-- ``started``). Returns the number.
local number = redis.call('HGET', KEYS[1], ARGV[1])
if number then return tonumber(number) end
number = redis.call('HINCRBY', KEYS[1], ':seq', 1)
redis.call('HSET', KEYS[1], ARGV[1], number, '#' .. number, ARGV[1])
redis.call('HSETNX', KEYS[2], 'started', ARGV[2])
return number
