"""The frontier's previous Redis layout, written as the code before it wrote it.

Used only by ``bench/frontier_memory.py`` (bytes side by side). Every queued request had an
id (a sequence number) in the ``queue`` sorted set scored ``-priority * 1e13 + id``, that score
again in the ``prio`` hash and its record in the ``data`` hash; delayed ones waited in
``delayed`` under their id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys

STEP = 10**13


def _queue(keys: FrontierKeys) -> str:
    return keys.queue_prefix.rstrip(":")  # "{spider}:queue"


def _prio(keys: FrontierKeys) -> str:
    return _queue(keys).replace(":queue", ":prio")


# KEYS: queue, data, prio, seq, delayed; ARGV: per request priority score part, due, json.
_SCHEDULE = r"""
local n = #ARGV / 3
local seq = redis.call('INCRBY', KEYS[4], n) - n
for a = 1, #ARGV, 3 do
  local priority, due, json = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]
  seq = seq + 1
  local id = string.format('%d', seq)
  local score = priority + seq
  redis.call('HSET', KEYS[2], id, json)
  redis.call('HSET', KEYS[3], id, string.format('%.17g', score))
  if due > 0 then
    redis.call('ZADD', KEYS[5], due, id)
  else
    redis.call('ZADD', KEYS[1], score, id)
  end
end
"""


def schedule(
    server: RedisClient, keys: FrontierKeys, records: Sequence[tuple[int, float, str]]
) -> None:
    """Write (priority, due, json) records as the previous frontier did, in batches of 500."""
    script = server.register_script(_SCHEDULE)
    for first in range(0, len(records), 500):
        args: list[Any] = []
        for priority, due, json in records[first : first + 500]:
            args.extend((-max(-400, min(400, priority)) * STEP, due, json))
        script(keys=[_queue(keys), keys.data, _prio(keys), keys.seq, keys.delayed], args=args)


def lease(
    server: RedisClient, keys: FrontierKeys, lease_id: str, worker: str, until: float
) -> None:
    """Lease a queued request to ``worker`` as the previous POP did."""
    server.zrem(_queue(keys), lease_id)
    server.zadd(keys.leases, {lease_id: until})
    server.hset(keys.owner, lease_id, worker)


# KEYS: queue, leases, owner, delayed, prio, data; ARGV: now, count, lease deadline, worker.
# The previous POP: a due delayed id or an expired lease went back to the queue only if it had
# a score in ``prio``, and left ``delayed``/``leases`` either way.
_POP = r"""
local now, count, deadline, worker = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local function requeue(ids)
  for _, id in ipairs(ids) do
    local score = redis.call('HGET', KEYS[5], id)
    if score then redis.call('ZADD', KEYS[1], score, id) end
  end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  requeue(due)
  redis.call('ZREM', KEYS[4], unpack(due))
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
if #expired > 0 then
  requeue(expired)
  redis.call('ZREM', KEYS[2], unpack(expired))
  redis.call('HDEL', KEYS[3], unpack(expired))
end
local result = {#due, #expired, 0}
if count > 0 then
  local ids = redis.call('ZRANGE', KEYS[1], 0, count - 1)
  if #ids > 0 then
    redis.call('ZREM', KEYS[1], unpack(ids))
    for _, id in ipairs(ids) do
      redis.call('ZADD', KEYS[2], deadline, id)
      redis.call('HSET', KEYS[3], id, worker)
      result[#result + 1] = id
      result[#result + 1] = redis.call('HGET', KEYS[6], id) or ''
    end
  end
end
result[3] = redis.call('ZCARD', KEYS[1])
return result
"""


def pop(
    server: RedisClient, keys: FrontierKeys, now: float, count: int, until: float, worker: str
) -> list[Any]:
    """Run the previous POP: {promoted, reclaimed, queue size, id1, json1, ...}."""
    script = server.register_script(_POP)
    result: list[Any] = script(
        keys=[_queue(keys), keys.leases, keys.owner, keys.delayed, _prio(keys), keys.data],
        args=[now, count, until, worker],
    )
    return result
