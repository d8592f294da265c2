-- KEYS: start list (``<spider>:start_urls``), its leases (``{<spider>:start_urls}:leases``)
-- ARGV: now, count, lease deadline, worker
-- Puts start entries whose lease expired back at the list's consuming end, then leases up to
-- ``count`` entries. A lease member is "<worker>:<time>:<n>\n<entry>", unique even for equal
-- entries. Returns the members.

local now, count, deadline, worker = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
for _, member in ipairs(expired) do
  local entry = string.sub(member, string.find(member, '\n', 1, true) + 1)
  redis.call('RPUSH', KEYS[1], entry)
end
if #expired > 0 then redis.call('ZREM', KEYS[2], unpack(expired)) end
local entries = redis.call('RPOP', KEYS[1], count)
local members = {}
if entries then
  for n, entry in ipairs(entries) do
    local member = worker .. ':' .. now .. ':' .. n .. '\n' .. entry
    redis.call('ZADD', KEYS[2], deadline, member)
    members[#members + 1] = member
  end
end
return members
