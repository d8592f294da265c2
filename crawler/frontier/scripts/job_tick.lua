-- KEYS: the job's state hash, the paused jobs (set), the cancelled jobs (set), the job's window
-- of answers
-- ARGV: the job's number, now (Unix time), seconds the state is kept (JOB_TTL), window (answers
-- kept; 0: no answers to add), failed, not failed (a worker's answers of the job since it last
-- wrote), ratio, then pairs (count, value)
-- A worker's tick for one crawl job. Its counts, if any, are added to the job's state, which
-- marks its last activity; the state is kept JOB_TTL seconds from now, or for good while the
-- job is paused (until it resumes). Its answers go to the job's failure threshold (answers.lua):
-- past it, the job is paused as ``scrapy frontier SPIDER job ID pause`` does, its state saying
-- by whom ("failure threshold") and why. While the job is paused, or once it is cancelled
-- (answers to requests that were in flight; paused, it would never be forgotten), no answer is
-- counted. Returns {answers in the window, failed among them, 1 when this call paused the job}.
local n, now, window = ARGV[1], ARGV[2], tonumber(ARGV[4])
local paused = redis.call('SISMEMBER', KEYS[2], n) == 1
if #ARGV > 7 then
  for i = 8, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', KEYS[1], 'last', now)
  if not paused then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
end
if window == 0 or paused or redis.call('SISMEMBER', KEYS[3], n) == 1 then return {0, 0, 0} end
local answers, bad, reason = past_threshold(KEYS[4], window, tonumber(ARGV[5]),
  tonumber(ARGV[6]), ARGV[7])
if not reason then return {answers, bad, 0} end
redis.call('SADD', KEYS[2], n)
redis.call('HSET', KEYS[1], 'paused', now, 'paused_by', 'failure threshold',
  'paused_reason', reason)
redis.call('PERSIST', KEYS[1])
return {answers, bad, 1}
