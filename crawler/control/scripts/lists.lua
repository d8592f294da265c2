-- Lists read in slices of CHUNK elements (job.lua, job_starts.lua): counted, or rebuilt
-- without some elements.
local CHUNK = 1000

-- How many of the first ``size`` elements of ``list`` ``matches``.
local function count_in_list(list, size, matches)
  local found = 0
  for first = 0, size - 1, CHUNK do
    for _, element in ipairs(redis.call('LRANGE', list, first, first + CHUNK - 1)) do
      if matches(element) then found = found + 1 end
    end
  end
  return found
end

-- ``list`` (``size`` long) rebuilt through ``spare``, a key in its slot, without the elements
-- ``matches``, the others' order kept; deleted when none is left. Returns whether it is left.
local function remove_from_list(list, size, spare, matches)
  redis.call('DEL', spare)
  for first = 0, size - 1, CHUNK do
    local kept = {}
    for _, element in ipairs(redis.call('LRANGE', list, first, first + CHUNK - 1)) do
      if not matches(element) then kept[#kept + 1] = element end
    end
    if #kept > 0 then redis.call('RPUSH', spare, unpack(kept)) end
  end
  if redis.call('EXISTS', spare) == 1 then
    redis.call('RENAME', spare, list)
    return true
  end
  redis.call('DEL', list)
  return false
end
