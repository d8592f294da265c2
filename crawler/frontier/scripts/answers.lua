-- A window of answers: the last ``window`` answers of a crawl or a crawl job, a list of "1"
-- (failed) and "0" (not), kept a day after its last write. ``add_answers`` adds ``failed`` and
-- ``fine`` answers and returns the answers in the window and the failed ones among them;
-- ``past_threshold`` also says why the crawl or job is to pause (else nil) when the window is
-- full and more than ``ratio`` of it failed, and then empties it (a resume counts afresh).
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

local function past_threshold(key, window, failed, fine, ratio)
  local answers, bad = add_answers(key, window, failed, fine)
  if answers < window or bad <= tonumber(ratio) * window then return answers, bad, nil end
  redis.call('DEL', key)
  return answers, bad, string.format('%d of the last %d answers failed (FAILURE_PAUSE_RATIO %s)',
    bad, window, ratio)
end
