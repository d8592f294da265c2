-- KEYS: a start list, a spare key in its slot ("{<start list>}:sweep")
-- ARGV: job id, the action on the job ("cancel" or another, see job.lua)
-- Counts the start entries naming the job (JSON objects whose "job" is the id); with "cancel"
-- removes them, the list rebuilt in its order. Returns the count.
local job, cancel = ARGV[1], ARGV[2] == 'cancel'
local function of_job(entry)
  if not string.match(entry, '^%s*{') then return false end
  local ok, value = pcall(cjson.decode, entry)
  return ok and type(value) == 'table' and value.job == job
end
local size = redis.call('LLEN', KEYS[1])
local found = count_in_list(KEYS[1], size, of_job)
if cancel and found > 0 then remove_from_list(KEYS[1], size, KEYS[2], of_job) end
return found
