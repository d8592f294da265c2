-- KEYS: the job's window of answers, the paused jobs (set), the job's state hash, the
-- cancelled jobs (set)
-- ARGV: window (answers kept), failed, not failed (a worker's answers of the job since it last
-- wrote), ratio, now (Unix time), the job's number
-- The failure threshold of one crawl job (answers.lua): past it, pauses the job as ``scrapy
-- frontier SPIDER job ID pause`` does, its state saying by whom ("failure threshold") and why.
-- While the job is paused, or once it is cancelled (answers to requests that were in flight;
-- paused, it would never be forgotten), nothing is counted. Returns {answers in the window,
-- failed among them, 1 when this call paused the job}.
local window, failed, fine = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = ARGV[6]
if redis.call('SISMEMBER', KEYS[2], n) == 1 or redis.call('SISMEMBER', KEYS[4], n) == 1 then
  return {0, 0, 0}
end
local answers, bad, reason = past_threshold(KEYS[1], window, failed, fine, ARGV[4])
if not reason then return {answers, bad, 0} end
redis.call('SADD', KEYS[2], n)
redis.call('HSET', KEYS[3], 'paused', ARGV[5], 'paused_by', 'failure threshold',
  'paused_reason', reason)
redis.call('PERSIST', KEYS[3])
return {answers, bad, 1}
