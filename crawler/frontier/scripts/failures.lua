-- KEYS: the fleet's window of answers (a list of "1" failed, "0" not), the pause hash
-- ARGV: window (answers kept), failed, not failed (a worker's answers since it last wrote),
-- ratio, now (Unix time)
-- Adds a worker's latest answers to the fleet's window of the last ``window`` answers. When the
-- window is full and more than ``ratio`` of it failed, pauses the crawl as ``scrapy frontier
-- SPIDER pause`` does (by "failure threshold", with the count as its reason) and empties the
-- window, so a resume starts counting afresh. While the crawl is paused nothing is counted.
-- Returns {answers in the window, failed among them, 1 when this call paused the crawl}.
local window, failed, fine = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ratio = tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, 0, 0} end
local answers, bad = add_answers(KEYS[1], window, failed, fine)
if answers < window or bad <= ratio * window then return {answers, bad, 0} end
local reason = string.format('%d of the last %d answers failed (FAILURE_PAUSE_RATIO %s)', bad,
  window, ARGV[4])
redis.call('HSET', KEYS[2], 'since', ARGV[5], 'by', 'failure threshold', 'reason', reason)
redis.call('DEL', KEYS[1])
return {answers, bad, 1}
