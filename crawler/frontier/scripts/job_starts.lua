-- KEYS: a start list, a spare key in its slot ("{<start list>}:sweep")
-- ARGV: job id, "count" or "cancel"
-- Counts the start entries naming the job (JSON objects whose "job" is the id); with "cancel"
-- removes them, the list rebuilt in its order. Returns the count.
local job, cancel = ARGV[1], ARGV[2] == 'cancel'
local CHUNK = 1000
local function of_job(entry)
  if not string.match(entry, '^%s*{') then return false end
  local ok, value = pcall(cjson.decode, entry)
  return ok and type(value) == 'table' and value.job == job
end
local size = redis.call('LLEN', KEYS[1])
local found = 0
for first = 0, size - 1, CHUNK do
  for _, entry in ipairs(redis.call('LRANGE', KEYS[1], first, first + CHUNK - 1)) do
    if of_job(entry) then found = found + 1 end
  end
end
if cancel and found > 0 then
  redis.call('DEL', KEYS[2])
  for first = 0, size - 1, CHUNK do
    local kept = {}
    for _, entry in ipairs(redis.call('LRANGE', KEYS[1], first, first + CHUNK - 1)) do
      if not of_job(entry) then kept[#kept + 1] = entry end
    end
    if #kept > 0 then redis.call('RPUSH', KEYS[2], unpack(kept)) end
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('RENAME', KEYS[2], KEYS[1])
  else
    redis.call('DEL', KEYS[1])
  end
end
return found
