-- KEYS: start list (``<spider>:start_urls``), its leases (``{<spider>:start_urls}:leases``)
-- ARGV: lease members a worker gives back unused, in the order pop_start leased them
-- Drops each lease and puts its entry back at the list's consuming end, so the entries come
-- out again in the order they first did. A member whose lease is gone (it expired and was
-- put back already) is skipped. Returns how many entries went back.

local given = 0
for i = #ARGV, 1, -1 do
  local member = ARGV[i]
  if redis.call('ZREM', KEYS[2], member) == 1 then
    redis.call('RPUSH', KEYS[1], string.sub(member, string.find(member, '\n', 1, true) + 1))
    given = given + 1
  end
end
return given
