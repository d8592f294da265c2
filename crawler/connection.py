"""The Redis client every component uses, built from settings through scrapy-redis
(``REDIS_URL``, ``REDIS_PARAMS``): :class:`Redis` retries commands with backoff when the
connection drops, so a Redis restart costs a pause, not a crash; with ``REDIS_CLUSTER``,
:class:`RedisCluster` (``REDIS_URL`` names any one node) does the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import redis
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object
from scrapy_redis.connection import SETTINGS_PARAMS_MAP, from_settings

from crawler import settings as project_settings
from crawler.config import setting
from crawler.config.rules import SettingsError, hidden, problem
from crawler.uris import mask_uri

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

# Reconnect attempts per command, with backoff from 50 ms doubling to 0.4 s: under a second of
# waiting in all, since every call blocks the reactor. Longer outages are ridden out above this
# level (the scheduler backs off and keeps its buffers; nothing is dropped).
RETRIES = 4
BACKOFF = ExponentialBackoff(cap=0.4, base=0.05)

CRAWL_CLIENT = "_crawl_redis_client"
# RESP2 unless REDIS_PARAMS says otherwise: RESP3 (redis-py's default) opens each connection
# with HELLO and a CLIENT MAINT_NOTIFICATIONS handshake, two round trips the crawl has no use
# for (no push messages, no client-side caching). The project works on either protocol.
PROTOCOL = 2
# What redis_from_settings returns: a client of one server, or of a cluster.
RedisClient: TypeAlias = redis.Redis | redis.cluster.RedisCluster


def _backoff_retry() -> Retry:
    return Retry(
        BACKOFF,
        RETRIES,
        (RedisConnectionError, RedisTimeoutError, ClusterDownError),
    )


class Redis(redis.Redis):
    """redis.Redis that reconnects with backoff on connection errors and timeouts."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Redis:
        # scrapy-redis passes retry_on_timeout, deprecated in redis-py; Retry covers it.
        kwargs.pop("retry_on_timeout", None)
        kwargs.setdefault("retry", Retry(BACKOFF, RETRIES))
        kwargs.setdefault("retry_on_error", [RedisConnectionError, RedisTimeoutError])
        # No CLIENT SETINFO: two round trips per connection for a label in CLIENT LIST.
        kwargs.setdefault("driver_info", None)
        kwargs.setdefault("protocol", PROTOCOL)
        client = super().from_url(url, **kwargs)
        assert isinstance(client, Redis)
        return client


def reply_text(value: bytes | str, errors: str = "strict") -> str:
    """A Redis reply as text (clients built with or without ``decode_responses``); ``errors``
    as ``bytes.decode`` takes it ("replace" for text only shown)."""
    return value.decode(errors=errors) if isinstance(value, bytes) else value


def reply_hash(raw: Mapping[Any, Any] | list[Any]) -> dict[Any, Any]:
    """An HGETALL reply as a dict: a cluster client's transaction (MULTI) hands back the flat
    list of names and values."""
    if isinstance(raw, list):
        return dict(zip(raw[::2], raw[1::2], strict=True))
    return dict(raw)


class RedisUnavailable(RuntimeError):
    """Redis could not be reached, even after retrying with backoff."""


class ClusterUnavailable(RedisConnectionError):
    """No node of the cluster answered, or some slots have no node serving them."""


def decode_counts(raw: Mapping[Any, Any]) -> dict[str, int]:
    """A Redis hash of integer counts as text -> int (values that are not integers skipped)."""
    counts: dict[str, int] = {}
    for name, value in raw.items():
        try:
            counts[reply_text(name)] = int(value)
        except ValueError:
            continue
    return counts


def _unreachable(exc: RedisClusterException) -> bool:
    """Whether redis-py gave up on the cluster for want of a reachable node (not a misuse)."""
    return (
        isinstance(exc, SlotNotCoveredError)
        or isinstance(exc.__cause__, RedisConnectionError | RedisTimeoutError)
        or "slots are not covered" in str(exc)
    )


def _reported(call: Callable[[], Any]) -> Any:
    """``call()``, with an unreachable cluster raised as :class:`ClusterUnavailable`."""
    try:
        return call()
    except RedisClusterException as exc:
        if _unreachable(exc):
            raise ClusterUnavailable(str(exc)) from exc
        raise


class RedisCluster(redis.cluster.RedisCluster):
    """redis.cluster.RedisCluster that waits with backoff while the cluster is unreachable: where
    redis-py raises ``RedisClusterException`` (not a ``RedisError``), every command retries as
    :class:`Redis` does, then fails with :class:`ClusterUnavailable` (a ``redis.ConnectionError``),
    so callers handle one server and a cluster alike. A pipeline is not retried (it is emptied when
    it runs) but fails the same."""

    def __init__(self, *args: Any, outage_retry: Retry | None = None, **kwargs: Any) -> None:
        # scrapy-redis passes retry_on_timeout, deprecated in redis-py; outage_retry covers it.
        kwargs.pop("retry_on_timeout", None)
        if str(kwargs.get("db", "0")) == "0":
            kwargs.pop("db", None)  # REDIS_DB=0 is what a cluster has; others are refused
        kwargs.setdefault("protocol", PROTOCOL)
        self.outage_retry = outage_retry or _backoff_retry()
        _reported(lambda: super(RedisCluster, self).__init__(*args, **kwargs))

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisCluster:
        return cls(url=url, **kwargs)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        parent: Callable[..., Any] = super().execute_command
        return self.outage_retry.call_with_retry(
            lambda: _reported(lambda: parent(*args, **kwargs)), lambda _error: None
        )

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        make: Callable[..., Any] = super().pipeline
        pipe = make(transaction, shard_hint)
        pipe.__class__ = ClusterPipeline
        assert isinstance(pipe, ClusterPipeline)
        return pipe


class ClusterPipeline(redis.cluster.ClusterPipeline):
    """The cluster pipeline, failing with :class:`ClusterUnavailable` when no node answers."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        result: list[Any] = _reported(lambda: super(ClusterPipeline, self).execute(raise_on_error))
        return result


def crawl_redis(crawler: Crawler) -> RedisClient:
    """The crawl's Redis client, one connection pool for all its components: a worker opens a few
    connections (a handshake of several round trips each), not some per component."""
    client = getattr(crawler, CRAWL_CLIENT, None)
    if client is None:
        client = redis_from_settings(crawler.settings)
        setattr(crawler, CRAWL_CLIENT, client)
    return cast(RedisClient, client)


def redis_from_settings(settings: BaseSettings) -> RedisClient:
    """The client for ``REDIS_URL`` and ``REDIS_PARAMS`` (:func:`redis_params`), as
    scrapy-redis builds it; with ``REDIS_CLUSTER``, a :class:`RedisCluster` (or
    ``REDIS_PARAMS``'s RedisCluster class). SettingsError for a ``REDIS_URL`` redis-py cannot
    connect with."""
    setting(settings, "REDIS_URL")
    params = redis_params(settings)
    if not setting(settings, "REDIS_CLUSTER"):
        return _client_of(settings, params)
    configured = params.get("redis_cls")
    if isinstance(configured, str):
        configured = load_object(configured)
    if not (isinstance(configured, type) and issubclass(configured, redis.cluster.RedisCluster)):
        params["redis_cls"] = RedisCluster
    cluster_settings = _with_params(settings, params)
    try:
        cluster: redis.cluster.RedisCluster = from_settings(cluster_settings)
    except ClusterUnavailable as exc:
        url = mask_uri(str(settings.get("REDIS_URL") or ""))
        raise RedisUnavailable(f"Redis Cluster at {url} is unreachable: {exc}") from exc
    return cluster


def _client_of(settings: BaseSettings, params: dict[str, Any]) -> redis.Redis:
    """The client of one server, with a connection of it made (none is opened): an argument
    redis-py does not take, or one it refuses, is a SettingsError naming REDIS_PARAMS here,
    not a traceback at the crawl's first command."""
    try:
        client: redis.Redis = from_settings(_with_params(settings, params))
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError) as exc:
        allowed = "arguments redis-py's client takes (TLS: a rediss:// REDIS_URL; it says: "
        allowed += f"{exc})"
        raise SettingsError(problem("REDIS_PARAMS", params, allowed, hidden)) from None
    return client


def redis_params(settings: BaseSettings) -> dict[str, Any]:
    """``REDIS_PARAMS`` over the project's own (crawler/settings.py), as scrapy-redis lays its
    over its defaults: a run that gives a CA file or a password keeps the client class that
    reconnects with backoff and the short timeouts (Redis calls run on the reactor thread),
    unless it names them."""
    return {**project_settings.REDIS_PARAMS, **settings.getdict("REDIS_PARAMS")}


def _with_params(settings: BaseSettings, params: dict[str, Any]) -> BaseSettings:
    """What scrapy-redis reads (REDIS_URL, REDIS_HOST, ...), with ``params`` as REDIS_PARAMS."""
    chosen = BaseSettings({name: settings.get(name) for name in SETTINGS_PARAMS_MAP})
    chosen.set("REDIS_PARAMS", params)
    return chosen
