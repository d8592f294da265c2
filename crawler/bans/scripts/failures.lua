-- KEYS: the fleet's window of answers (a list of "1" failed, "0" not), the pause hash
-- ARGV: window (answers kept), failed, not failed (a worker's answers since it last wrote),
-- ratio, now (Unix time)
-- Adds a worker's latest answers to the fleet's window (answers.lua); past the threshold,
-- pauses the crawl as ``scrapy frontier SPIDER pause`` does (by "failure threshold", with the
-- count as its reason). While the crawl is paused nothing is counted.
-- Returns {answers in the window, failed among them, 1 when this call paused the crawl}.
local window, failed, fine = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, 0, 0} end
local answers, bad, reason = past_threshold(KEYS[1], window, failed, fine, ARGV[4])
if not reason then return {answers, bad, 0} end
redis.call('HSET', KEYS[2], 'since', ARGV[5], 'by', 'failure threshold', 'reason', reason)
return {answers, bad, 1}
