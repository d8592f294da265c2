"""The frontier's previous Redis layout, written as the code before it wrote it.

Used only by ``bench/frontier_memory.py`` (bytes side by side) and by the test that checks that
entries written this way still load. Every queued request had an id (a sequence number) in the
``queue`` sorted set scored ``-priority * 1e13 + id``, that score again in the ``prio`` hash
and its record in the ``data`` hash; delayed ones waited in ``delayed`` under their id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.scheduling.frontier import FrontierKeys

STEP = 10**13

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
        script(keys=[keys.queue, keys.data, keys.prio, keys.seq, keys.delayed], args=args)


def lease(
    server: RedisClient, keys: FrontierKeys, lease_id: str, worker: str, until: float
) -> None:
    """Lease a queued request to ``worker`` as the previous POP did."""
    server.zrem(keys.queue, lease_id)
    server.zadd(keys.leases, {lease_id: until})
    server.hset(keys.owner, lease_id, worker)
