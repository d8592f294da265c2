-- Every frontier script begins with the same five keys and the queue lists' prefix:
-- KEYS: queues, data, legacy queue, legacy prio, seq; ARGV[1]: "{spider}:queue:".

Q.queues, Q.data, Q.legacy_queue, Q.legacy_prio, Q.seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5]
Q.prefix = ARGV[1]
local function new_id(n, priority)
  if priority == '0' then return string.format('%d', n) end
  return string.format('%d', n) .. ':' .. priority
end
