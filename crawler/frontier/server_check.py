"""What only the frontier's Redis server can tell, checked before anything is leased: the start
key's type, and the RedisBloom module when DUPEFILTER_MODE is "redisbloom".

``scrapy crawl`` checks before the crawler starts (:func:`crawler.preflight.check_frontier_server`
calls :func:`check_frontier`), and the frontier scheduler checks again when it opens, under any
runner, reading the frontier's sizes in the same round trip. Either raises SettingsError naming
what is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from crawler.config.rules import SettingsError, problem
from crawler.frontier.queue import queue_sizes, read_sizes

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys


# Calls BF.EXISTS the way the frontier's scripts call BF.ADD, so a cluster routes it by its key.
_PROBE_REDISBLOOM = "return redis.call('BF.EXISTS', KEYS[1], ARGV[1])"


def check_frontier(
    server: RedisClient, keys: FrontierKeys, dupefilter_mode: str
) -> dict[str, int] | None:
    """Raise SettingsError when this Redis cannot hold the frontier: the start key holds another
    type than a list, or DUPEFILTER_MODE is "redisbloom" without the RedisBloom module.
    One round trip, which also reads the frontier's sizes (``Frontier.sizes``), returned; None
    on a cluster (its pipeline would first ask a node to parse the queue's script) or if Redis
    refused the read. An unreachable Redis raises its RedisError."""
    pipe = server.pipeline(transaction=False)
    pipe.type(keys.start)
    probe = dupefilter_mode == "redisbloom"
    if probe:
        pipe.execute_command("EVAL", _PROBE_REDISBLOOM, 1, keys.dupefilter, "probe")
    sized = not isinstance(server, RedisCluster)
    if sized:
        queue_sizes(pipe, keys)
    results = pipe.execute(raise_on_error=False)
    _refuse_frontier(results, keys, dupefilter_mode)
    sizes = results[1 + probe :]
    if not sized or any(isinstance(size, Exception) for size in sizes):
        return None
    return read_sizes(sizes)


def _refuse_frontier(results: list[Any], keys: FrontierKeys, dupefilter_mode: str) -> None:
    """Raise SettingsError for what :func:`check_frontier`'s replies say is wrong."""
    kind = results[0].decode() if isinstance(results[0], bytes) else str(results[0])
    problems = []
    if kind not in ("list", "none"):
        problems.append(
            f"REDIS_START_URLS_KEY: the Redis key {keys.start} holds a {kind}: must be a list "
            "of start entries (push them with LPUSH; REDIS_START_URLS_AS_SET is not supported)"
        )
    if dupefilter_mode == "redisbloom" and isinstance(results[1], ResponseError):
        refused = str(results[1]).splitlines()[0]
        if "unknown command" in refused.lower():
            refused = "this Redis has no RedisBloom module"
        allowed = f"bloom, exact or none ({refused})"
        problems.append(problem("DUPEFILTER_MODE", dupefilter_mode, allowed))
    if problems:
        raise SettingsError(*problems)
