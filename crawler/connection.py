"""The Redis client every component uses, built from settings through scrapy-redis.

scrapy-redis builds clients from ``REDIS_URL`` and ``REDIS_PARAMS``; ``REDIS_PARAMS["redis_cls"]``
points it at :class:`Redis` below, which retries commands with exponential backoff when the
connection drops, so a Redis restart or a network blip costs a pause, not a crash.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from scrapy.settings import BaseSettings
from scrapy_redis.connection import from_settings

# Reconnect attempts per command, with backoff capped at 2 s: about 15 s of waiting in all.
RETRIES = 10


class Redis(redis.Redis):
    """redis.Redis that reconnects with backoff on connection errors and timeouts."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Redis:
        # scrapy-redis passes retry_on_timeout, deprecated in redis-py; Retry covers it.
        kwargs.pop("retry_on_timeout", None)
        kwargs.setdefault("retry", Retry(ExponentialBackoff(cap=2.0, base=0.05), RETRIES))
        kwargs.setdefault("retry_on_error", [RedisConnectionError, RedisTimeoutError])
        client = super().from_url(url, **kwargs)
        assert isinstance(client, Redis)
        return client


class RedisUnavailable(RuntimeError):
    """Redis could not be reached, even after retrying with backoff."""


def redis_from_settings(settings: BaseSettings) -> redis.Redis:
    """The Redis client for ``REDIS_URL`` and ``REDIS_PARAMS``, as scrapy-redis builds it."""
    client: redis.Redis = from_settings(settings)
    return client
