-- KEYS: (prelude), delayed, dupefilter base, cancelled jobs, job deadlines, paused jobs, job
-- budgets, jobs' requests handed out
-- ARGV: (prefix), mode, capacity, error_rate, then per request 8 values:
--       fingerprint hex, h1, h2, dont_filter (0, 1, or 2 for a seed), priority (integer),
--       due (0 = now), json, depth ("" for none; see dupefilter.lua)
-- Returns one flag per request: 1 scheduled, 0 filtered as a duplicate, 2 dropped: a request
-- of a cancelled or expired job passes the filter and is dropped; one of a paused job is
-- parked (1, queue.lua's held_back).
set_job_keys(6)
local now = tonumber(redis.call('TIME')[1])

local mode, capacity, error_rate = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local SEED_SALT = 2654435761  -- a seed's own place in the filter, apart from its URL's
local results = {}
for a = 5, #ARGV, 8 do
  local fp, h1, h2, dont_filter = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local priority, due, json = ARGV[a + 4], tonumber(ARGV[a + 5]), ARGV[a + 6]
  local depth = tonumber(ARGV[a + 7])
  local seen = false
  local dropped = job_hold(json, now) == 'drop'  -- a cancelled job's: the filter is left alone
  if not dropped and dont_filter == '2' then
    -- A seed (a start entry's request): dropped only if seeded before, whatever link found
    -- its URL first; its URL is marked seen (at its depth), so links to it are dropped after it.
    local seed_h1 = string.format('%d', (tonumber(h1) + SEED_SALT) % 4294967296)
    seen = seen_or_add(mode, KEYS[5], 'seed:' .. fp, seed_h1, h2, capacity, error_rate)
    seen_or_add(mode, KEYS[5], fp, h1, h2, capacity, error_rate, depth)
  elseif not dropped and dont_filter ~= '1' then
    seen = seen_or_add(mode, KEYS[5], fp, h1, h2, capacity, error_rate, depth)
  end
  if not (seen or dropped or (due == 0 and held_back(json, priority, now))) then
    if due > 0 then
      local id = new_id(redis.call('INCR', Q.seq), priority)
      redis.call('HSET', Q.data, id, json)
      redis.call('ZADD', KEYS[4], due, id)
    else
      push(priority, json, false)
    end
  end
  results[#results + 1] = (seen and 0) or (dropped and 2) or 1
end
return results
