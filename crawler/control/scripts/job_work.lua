-- KEYS: (prelude), a queue list, or a sorted set of ids (delayed, leases)
-- ARGV: (prefix), "list" or "ids", the first index, how many, then job numbers
-- Reads ``how many`` records of KEYS[4] from the first index (a list's records, or the records
-- of a sorted set's ids) and returns the job numbers among ARGV that one of them carries: jobs
-- with work left (``jobs.forget_ended_jobs``). One slice a call: the caller walks a
-- whole key slice by slice, so Redis is never held for long.
local wanted, found = {}, {}
for i = 5, #ARGV do wanted[ARGV[i]] = true end
local first, count = tonumber(ARGV[3]), tonumber(ARGV[4])
local function look(record)
  local n = record and job_of(record)
  if n and wanted[n] then
    wanted[n] = nil
    found[#found + 1] = n
  end
end
if ARGV[2] == 'list' then
  for _, record in ipairs(redis.call('LRANGE', KEYS[4], first, first + count - 1)) do
    look(record)
  end
else
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], first, first + count - 1)) do
    look(redis.call('HGET', Q.data, id))
  end
end
return found
