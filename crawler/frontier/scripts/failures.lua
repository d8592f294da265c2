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
local function push(value, count)
  count = math.min(count, window)
  while count > 0 do
    local chunk = {}
    for i = 1, math.min(count, 500) do chunk[i] = value end
    redis.call('LPUSH', KEYS[1], unpack(chunk))
    count = count - #chunk
  end
end
push('0', fine)
push('1', failed)
redis.call('LTRIM', KEYS[1], 0, window - 1)
redis.call('EXPIRE', KEYS[1], 86400)
local answers, bad = redis.call('LRANGE', KEYS[1], 0, -1), 0
for _, answer in ipairs(answers) do
  if answer == '1' then bad = bad + 1 end
end
if #answers < window or bad <= ratio * window then return {#answers, bad, 0} end
local reason = string.format('%d of the last %d answers failed (FAILURE_PAUSE_RATIO %s)', bad,
  window, ARGV[4])
redis.call('HSET', KEYS[2], 'since', ARGV[5], 'by', 'failure threshold', 'reason', reason)
redis.call('DEL', KEYS[1])
return {#answers, bad, 1}
