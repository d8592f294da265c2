-- KEYS: (prelude), leases, owner, dead, jobs' pages done, jobs' dead letters
-- ARGV: (prefix), worker, lease deadline (for renewals), then ops as triples (op, id, payload):
--   l = adopt (payload: the record of a request the worker made and kept for itself, on a turn
--   it took ahead, see credit.lua: written as leased to it, as if popped, before the ack of the
--   page that made it, so a worker that dies leaves it to expire and come back like any lease),
--   a = ack (done; payload: the items of the page stored, or empty), r = release (back to the
--   queue), n = renew the lease, d = dead letter (payload: JSON object describing why, stored
--   with the request; its "items_stored" the items of the page stored before it failed).
-- Any other op applies only while ``worker`` still owns the lease. An ack or a dead letter of a
-- request of a crawl job (its record begins with the job's number, see job_of) adds one to the
-- job's count in the hash of pages done or of dead letters, the items stored to the field
-- "<n>:items" of the first, and a dead letter whose reason is a spider's or a pipeline's error to
-- "<n>:errors". Returns the number of leases owned (an unknown op changes nothing).

-- As crawler/frontier/leases.py names them.
local ADOPT, ACK, RELEASE, RENEW, DEAD = 'l', 'a', 'r', 'n', 'd'
local worker, deadline = ARGV[2], ARGV[3]
local applied = 0
local released = {}
local function forget(id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
end
local function count_job(job, op, payload)
  redis.call('HINCRBY', op == ACK and KEYS[7] or KEYS[8], job, 1)
  local stored = op == ACK and payload or string.match(payload, '"items_stored":(%d+)')
  if tonumber(stored) then redis.call('HINCRBY', KEYS[7], job .. ':items', tonumber(stored)) end
  if op == DEAD and (string.find(payload, '"reason":"spider_error', 1, true)
      or string.find(payload, '"reason":"item_error', 1, true)) then
    redis.call('HINCRBY', KEYS[7], job .. ':errors', 1)
  end
end
for a = 4, #ARGV, 3 do
  local op, id, payload = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if op == ADOPT then
    redis.call('HSET', Q.data, id, payload)
    redis.call('ZADD', KEYS[4], deadline, id)
    redis.call('HSET', KEYS[5], id, worker)
  end
  if redis.call('HGET', KEYS[5], id) == worker then
    applied = applied + 1
    if op == RENEW then
      redis.call('ZADD', KEYS[4], 'XX', deadline, id)
    elseif op == RELEASE then
      forget(id)
      released[#released + 1] = id
    elseif op == ACK or op == DEAD then
      local request = redis.call('HGET', Q.data, id)
      local job = request and job_of(request)
      if job then count_job(job, op, payload) end
      if op == DEAD then
        if job and string.sub(request, 1, 1) ~= '{' then  -- its JSON form in the letter
          request = '{"j":' .. job .. ',' .. string.sub(request, #job + 2)
        end
        local letter = '{"request":' .. (request or 'null') .. ',"failure":' .. payload .. '}'
        redis.call('LPUSH', KEYS[6], letter)
      end
      forget(id)
      redis.call('HDEL', Q.data, id)
    end
  end
end
requeue(released)
return applied
