"""What only the frontier's Redis server can tell, checked before anything is leased: the start
key's type, and the RedisBloom module when DUPEFILTER_MODE is "redisbloom".

``scrapy crawl`` checks before the crawler starts (:func:`crawler.preflight.check_frontier_server`
calls :func:`check_frontier`), and the frontier scheduler checks again when it opens, under any
runner. Either raises SettingsError naming what is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from crawler.config.rules import SettingsError, problem

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys


# Calls BF.EXISTS the way the frontier's scripts call BF.ADD, so a cluster routes it by its key.
_PROBE_REDISBLOOM = "return redis.call('BF.EXISTS', KEYS[1], ARGV[1])"


def check_frontier(server: RedisClient, keys: FrontierKeys, dupefilter_mode: str) -> None:
    """Raise SettingsError when this Redis cannot hold the frontier: the start key holds another
    type than a list, or DUPEFILTER_MODE is "redisbloom" without the RedisBloom module. An
    unreachable Redis raises its RedisError."""
    pipe = server.pipeline(transaction=False)
    pipe.type(keys.start)
    if dupefilter_mode == "redisbloom":
        pipe.execute_command("EVAL", _PROBE_REDISBLOOM, 1, keys.dupefilter, "probe")
    _refuse_frontier(pipe.execute(raise_on_error=False), keys, dupefilter_mode)


def start_key_problem(key: str, kind: str) -> str:
    """What is wrong with a start key ``key`` that holds a ``kind`` (a Redis type, not a list)."""
    return (
        f"REDIS_START_URLS_KEY: the Redis key {key} holds a {kind}: must be a list "
        "of start entries (push them with LPUSH; REDIS_START_URLS_AS_SET is not supported)"
    )


def wrong_type_problem(key: str, kind: str, must: str) -> str:
    """What is wrong with the key ``key`` of the frontier or the fleet that holds a ``kind``
    where its spider's workers keep ``must`` (a type and what it holds), worded as
    :func:`start_key_problem`."""
    return f"the Redis key {key} holds a {kind}: must be {must}"


def _refuse_frontier(results: list[Any], keys: FrontierKeys, dupefilter_mode: str) -> None:
    """Raise SettingsError for what :func:`check_frontier`'s replies say is wrong."""
    kind = results[0].decode() if isinstance(results[0], bytes) else str(results[0])
    problems = [] if kind in ("list", "none") else [start_key_problem(keys.start, kind)]
    if dupefilter_mode == "redisbloom" and isinstance(results[1], ResponseError):
        refused = str(results[1]).splitlines()[0]
        if "unknown command" in refused.lower():
            refused = "this Redis has no RedisBloom module"
        allowed = f"bloom, exact or none ({refused})"
        problems.append(problem("DUPEFILTER_MODE", dupefilter_mode, allowed))
    if problems:
        raise SettingsError(*problems)
