-- A window of answers: the last ``window`` answers of a crawl or a crawl job, a list of "1"
-- (failed) and "0" (not), kept a day after its last write. Adds ``failed`` and ``fine`` answers
-- and returns the answers in the window and the failed ones among them.
local function add_answers(key, window, failed, fine)
  local function push(value, count)
    count = math.min(count, window)
    while count > 0 do
      local chunk = {}
      for i = 1, math.min(count, 500) do chunk[i] = value end
      redis.call('LPUSH', key, unpack(chunk))
      count = count - #chunk
    end
  end
  push('0', fine)
  push('1', failed)
  redis.call('LTRIM', key, 0, window - 1)
  redis.call('EXPIRE', key, 86400)
  local answers, bad = redis.call('LRANGE', key, 0, -1), 0
  for _, answer in ipairs(answers) do
    if answer == '1' then bad = bad + 1 end
  end
  return #answers, bad
end
