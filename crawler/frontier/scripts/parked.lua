-- KEYS: the paused jobs (a set of job numbers; <key>:<number> lists a job's parked records)
-- Returns how many requests of paused jobs are parked: held until their job resumes, no pop
-- hands them out (queued.lua counts them among the queued too: work left).
local total = 0
for _, n in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  total = total + redis.call('LLEN', KEYS[1] .. ':' .. n)
end
return total
