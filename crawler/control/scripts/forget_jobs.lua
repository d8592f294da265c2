-- KEYS: the spider's jobs hash, cancelled jobs (set), job deadlines, paused jobs (set), job
-- budgets, jobs' requests handed out, jobs' pages done, jobs' dead letters (hashes), then the
-- state hash of each job in ARGV
-- ARGV: job ids
-- Forgets each job whose state hash expired (JOB_TTL after its last activity) and that is not
-- paused: its id and number in the jobs hash, and its number in the other keys. Its number is
-- never given again (``:seq``). Returns the ids forgotten.
local forgotten = {}
for i, job in ipairs(ARGV) do
  local n = redis.call('HGET', KEYS[1], job)
  if n and redis.call('EXISTS', KEYS[8 + i]) == 0 and redis.call('SISMEMBER', KEYS[4], n) == 0 then
    redis.call('HDEL', KEYS[1], job, '#' .. n)
    redis.call('SREM', KEYS[2], n)
    for _, k in ipairs({3, 5, 6, 7, 8}) do
      redis.call('HDEL', KEYS[k], n, n .. ':dropped', n .. ':items', n .. ':errors')
    end
    forgotten[#forgotten + 1] = job
  end
end
return forgotten
