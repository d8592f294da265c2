"""The fleet's circuit breaker per host (docs/politeness.md#a-circuit-breaker-per-host).

A host (with its port when the URL names another than its scheme's: :func:`site_of`) that
answers 429 or 503 without a usable ``Retry-After`` (absent, unreadable or 0), or
fails at the connection level (refused, reset, timed out, no DNS answer), is blocked for every
worker: its cool-down (``{spider}:bans``, as a ban's) lasts HOST_BLOCK_START seconds, doubled at
each new incident up to HOST_BLOCK_MAX, with up to 10 % jitter, and starts again at the first step
once the host has been quiet for HOST_BLOCK_FORGIVE seconds after its last block. Failures of
requests that went before the current block ended are the same incident: N requests in flight
failing together advance the backoff by one step. State per host lives in ``{spider}:breaker``
(step, incident, end) and ``{spider}:breaker_failures`` (failures in a row, by kind), one atomic
script (``crawler/bans/scripts/breaker.lua``) per failure; an answer of the host that is not a
5xx nor a 429, seen by a worker that knows of its failures, clears the count. A 429 or 503 with a
usable ``Retry-After`` is no step: its host cools down for the fleet until then (at most
BAN_COOLDOWN_MAX).

After HOST_MAX_EXCEPTIONS connection-level failures in a row the host is *unreachable*, and after
LINKS_ROBOTS_5XX_TRIES robots.txt answers of 5xx in a row its robots.txt *unavailable*: a mark
(a cool-down of the pseudo-identity ``!host_unreachable`` or ``!robots_unavailable``, lasting
HOST_BLOCK_MAX) with which every worker dead-letters the host's requests as they come out of the
frontier, with that reason. ``scrapy frontier SPIDER unban HOST`` lifts a host's block and marks
and resets its step; ``requeue`` lifts every mark before it brings the dead letters back.
HOST_BLOCK_START 0 turns the breaker off (the ``domains`` spider, whose failures are results).

With several identities (bind addresses, proxies) a failure through one blocks that identity
on the host (the "host" ``host|identity``, same steps), or on every host (``*|identity``) when
it is the identity's own (:func:`identity_at_fault`); the host is blocked only when it fails
while every other identity cools down there (the ban middleware decides).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import ParseResult, SplitResult, urlsplit

from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    ResponseDataLossError,
)
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import error as net

from crawler.config import setting
from crawler.config.rules import SettingsError, problem
from crawler.connection import crawl_redis, reply_text
from crawler.frontier.lua import read_script
from crawler.keys import bans_key, breaker_failures_key, breaker_key, reasons_key
from crawler.uris import of_site

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

UNREACHABLE = "host_unreachable"
ROBOTS_UNAVAILABLE = "robots_unavailable"
# The marks, as the reasons of the dead letters they make.
MARKS = (UNREACHABLE, ROBOTS_UNAVAILABLE)
# The answers that trip the breaker when they carry no usable Retry-After.
TRIPPING_STATUSES = frozenset({429, 503})
# Failures at the connection level: the host did not answer at all.
CONNECTION_FAILURES: tuple[type[BaseException], ...] = (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,  # reset, closed without an answer
    DownloadTimeoutError,
    ResponseDataLossError,
    net.ConnectError,
    net.ConnectionDone,
    net.ConnectionLost,
    TunnelError,
)
# The host of an identity's block on every host: its own failure, not a host's.
EVERY_HOST = "*"
ATTRIBUTE = "_crawler_host_breaker"
# A host's failure for the fleet, one atomic call (scripts/breaker.lua).
BREAKER = read_script("breaker", "crawler.bans")


class UnheardTunnelError(TunnelError):
    """A proxy refused the tunnel with an answer its client kept to itself: Chromium's
    ``net::ERR_TUNNEL_CONNECTION_FAILED`` (crawler/browser/failures.py) is the same for a 403
    and for a 502, lest a proxy pass its page off as the host's (crbug.com/137891)."""


class HostMarked(IgnoreRequest):
    """A request of a host marked unreachable (or whose robots.txt is unavailable), dead-lettered
    with the mark as its reason."""

    def __init__(self, mark: str, error: str) -> None:
        super().__init__(error)
        self.mark = mark


def identity_at_fault(exception: BaseException, proxied: bool) -> bool:
    """Whether a connection failure is the identity's own, whatever the host: a bind address the
    machine cannot bind, or, through a proxy (``proxied``), the proxy refusing the connection,
    unknown or unreachable (not a timeout: the host may be slow), or refusing the tunnel (not
    with a 5xx, which says the proxy could not reach the host; an unheard answer may have been
    one: :class:`UnheardTunnelError`)."""
    if isinstance(exception, net.ConnectBindError):
        return True
    if not proxied or isinstance(exception, UnheardTunnelError):
        return False
    if isinstance(exception, TunnelError):
        status = re.search(r"'status': (\d+)", str(exception))
        return status is None or not 500 <= int(status.group(1)) < 600
    refused = (DownloadConnectionRefusedError, CannotResolveHostError, net.ConnectError)
    return isinstance(exception, refused) and not isinstance(exception, net.TCPTimedOutError)


def healthy(status: int) -> bool:
    """Whether an answer of ``status`` shows its host well: not a 5xx, not a 429 (it clears the
    host's failures in a row)."""
    return status < 500 and status not in TRIPPING_STATUSES


def site_of(request: Request) -> str:
    """What the breaker blocks: the request's host, with its port when the URL names one that
    is not its scheme's (a refused port says nothing of the host's others)."""
    return _site(urlparse_cached(request))


def site_of_url(url: str) -> str:
    """:func:`site_of` for a URL."""
    return _site(urlsplit(url))


def _site(parts: SplitResult | ParseResult) -> str:
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        return host
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return host if port is None or port == default else f"{host}:{port}"


def mark_scope(mark: str) -> str:
    """The pseudo-identity whose cool-down on a host holds ``mark``."""
    return f"!{mark}"


@dataclass(frozen=True)
class BlockSteps:
    """HOST_BLOCK_START, HOST_BLOCK_MAX, HOST_BLOCK_FORGIVE (seconds), HOST_MAX_EXCEPTIONS and
    LINKS_ROBOTS_5XX_TRIES (0: never), read and checked together."""

    start: float
    longest: float
    forgive: float
    max_exceptions: int
    robots_tries: int

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BlockSteps:
        steps = cls(
            setting(settings, "HOST_BLOCK_START"),
            setting(settings, "HOST_BLOCK_MAX"),
            setting(settings, "HOST_BLOCK_FORGIVE"),
            setting(settings, "HOST_MAX_EXCEPTIONS"),
            setting(settings, "LINKS_ROBOTS_5XX_TRIES"),
        )
        if steps.start and steps.longest < steps.start:
            allowed = f"at least HOST_BLOCK_START ({steps.start:g})"
            raise SettingsError(problem("HOST_BLOCK_MAX", steps.longest, allowed))
        return steps


@dataclass(frozen=True)
class Block:
    """What one failure did: the host's block ends at ``until`` (Unix time), at step ``level``;
    ``fresh`` when this failure started it; ``failures`` in a row towards each mark it counted
    towards, and the ``marks`` those reached: the host is now marked with them."""

    until: float
    level: int
    fresh: bool
    failures: dict[str, int] = field(default_factory=dict)
    marks: frozenset[str] = frozenset()

    @property
    def marked(self) -> bool:
        return bool(self.marks)


# Hosts with failures a worker remembers, to clear their counts when they answer, at most.
WATCHED_HOSTS = 10_000


class HostBreaker:
    """One per crawl (:meth:`of`): the circuit breaker of the module's docstring."""

    def __init__(self, server: RedisClient, spider: str, steps: BlockSteps) -> None:
        self.server = server
        self.spider = spider
        self.steps = steps
        self._script = server.register_script(BREAKER)
        # Hosts with failures in a row that this worker recorded or saw blocked: a success of
        # one clears its count for the fleet.
        self.watched: set[str] = set()
        # Told of each block and mark this worker writes (field, end): the ban middleware's
        # view of the fleet's cool-downs, so it holds the host back at once.
        self.noted: Callable[[str, float], None] = lambda field, until: None
        # The marks this worker set (field: end), for a caller that saw the same failure.
        self._marks: dict[str, float] = {}

    @classmethod
    def of(cls, crawler: Crawler) -> HostBreaker:
        """The crawl's breaker (one per crawler, made on first use)."""
        breaker = getattr(crawler, ATTRIBUTE, None)
        if not isinstance(breaker, HostBreaker):
            assert crawler.spidercls is not None
            steps = BlockSteps.from_settings(crawler.settings)
            breaker = cls(crawl_redis(crawler), crawler.spidercls.name, steps)
            setattr(crawler, ATTRIBUTE, breaker)
        return breaker

    @property
    def enabled(self) -> bool:
        return self.steps.start > 0

    def trips(self, response: Response, retry_after: float) -> bool:
        """Whether the answer is one the breaker counts (429 or 503, no usable Retry-After)."""
        return self.enabled and response.status in TRIPPING_STATUSES and retry_after <= 0

    def waits(self, response: Response, retry_after: float) -> bool:
        """Whether the answer holds its host back for the fleet until its Retry-After (429 or
        503 with a usable one): no step of the breaker, the server said how long."""
        return self.enabled and response.status in TRIPPING_STATUSES and retry_after > 0

    def failed(self, host: str, sent: float, why: str, counted: tuple[str, ...] = ()) -> Block:
        """Record a failure of ``host`` by a request that went at ``sent`` (Unix time), counted
        towards the marks ``counted`` in their order (a connection failure: UNREACHABLE;
        robots.txt's: then ROBOTS_UNAVAILABLE), in one call; the first mark the failure sets
        wins: those after it are not counted."""
        limits = {
            UNREACHABLE: self.steps.max_exceptions,
            ROBOTS_UNAVAILABLE: self.steps.robots_tries,
        }
        keys = [breaker_key(self.spider), breaker_failures_key(self.spider)]
        keys += [bans_key(self.spider), reasons_key(self.spider)]
        steps = self.steps
        args: list[str | float] = [host, f"{time.time():.3f}", f"{sent:.3f}", steps.start]
        args += [steps.longest, steps.forgive, random.uniform(1.0, 1.1), why]
        for mark in counted:
            args += [f"{host}|{mark_scope(mark)}", limits.get(mark, 0)]
        reply: Any = self._script(keys=keys, args=args)
        if len(self.watched) >= WATCHED_HOSTS:
            self.watched.clear()  # their counts end with a failure after HOST_BLOCK_FORGIVE
        self.watched.add(host)
        until, level, fresh = float(reply_text(reply[0])), int(reply[1]), bool(int(reply[2]))
        failures = {mark: int(count) for mark, count in zip(counted, reply[3:], strict=False)}
        reached = {mark for mark, count in failures.items() if 0 < limits.get(mark, 0) <= count}
        self.noted(host, until)
        for mark in reached:
            self._mark(f"{host}|{mark_scope(mark)}")
        return Block(until, level, fresh, failures, frozenset(reached))

    def _mark(self, name: str) -> None:
        """Remember a mark this worker set ("host|!mark", see :meth:`marked`) and tell it."""
        if len(self._marks) >= WATCHED_HOSTS:
            self._marks.clear()
        self._marks[name] = time.time() + self.steps.longest
        self.noted(name, self._marks[name])

    def identity_failed(self, host: str, identity: str, sent: float, why: str) -> Block:
        """Record a failure of ``host`` (EVERY_HOST: of any) through ``identity``: a block of
        the identity there (a cool-down "host|identity", by the same steps as a host's), not of
        the host."""
        return self.failed(f"{host}|{identity}", sent, why)

    def marked(self, host: str, mark: str) -> bool:
        """Whether this worker marked ``host`` with ``mark`` (its failure just now, say), and the
        mark still holds (no Redis read: a mark another worker set stops the host's requests
        before they go, in the ban middleware)."""
        return self._marks.get(f"{host}|{mark_scope(mark)}", 0.0) > time.time()

    def succeeded(self, host: str) -> None:
        """A host that answered: its failures in a row, if this worker knows of any, are over."""
        if host in self.watched:
            self.watched.discard(host)
            fields = [f"{host}|{mark_scope(mark)}" for mark in MARKS]
            self.server.hdel(breaker_failures_key(self.spider), *fields)


def lift_block(server: RedisClient, spider: str, host: str) -> None:
    """Forget a host's step and failures, and the steps of its identities' blocks there
    (``unban``; a host name names every port of it too: ``of_site``): its next incident, and
    theirs, is a first one."""
    pipe = server.pipeline(transaction=False)
    for key in (breaker_key(spider), breaker_failures_key(spider)):
        fields = _fields(server, key, lambda field: of_site(field.partition("|")[0], host))
        if fields:
            pipe.hdel(key, *fields)
    pipe.execute()


def lift_identity_block(
    server: RedisClient, spider: str, identity: str, host: str | None = None
) -> list[str]:
    """Forget the steps of ``identity``'s blocks on ``host`` (None: on every host, and its own,
    EVERY_HOST's): its next incident there is a first one. The hosts it had a step on."""
    fields = _fields(
        server,
        breaker_key(spider),
        lambda field: (
            field.partition("|")[2] == identity
            and (host is None or of_site(field.partition("|")[0], host))
        ),
    )
    if fields:
        server.hdel(breaker_key(spider), *fields)
    return [field.partition("|")[0] for field in fields]


def _fields(server: RedisClient, key: str, wanted: Callable[[str], bool]) -> list[str]:
    names: Any = server.hkeys(key)
    return [name for name in map(reply_text, names) if wanted(name)]


def lift_marks(server: RedisClient, spider: str) -> list[str]:
    """Lift every host's unreachable and robots-unavailable mark (before a ``requeue``); the
    marks lifted, as "host|!mark"."""
    names: Any = server.hkeys(bans_key(spider))
    scopes = tuple(f"|{mark_scope(mark)}" for mark in MARKS)
    fields = [name for name in map(reply_text, names) if name.endswith(scopes)]
    if fields:
        pipe = server.pipeline(transaction=False)
        pipe.hdel(bans_key(spider), *fields)
        pipe.hdel(reasons_key(spider), *fields)
        pipe.hdel(breaker_failures_key(spider), *fields)
        pipe.execute()
    return fields


@dataclass(frozen=True)
class HostState:
    """A host the breaker knows: its step, when its block ends, failures in a row by mark."""

    host: str
    level: int
    until: float
    failures: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "level": self.level, "until": self.until, **self.failures}


def breaker_states(server: RedisClient, spider: str) -> list[HostState]:
    """Every host with a breaker step, latest block end first."""
    pipe = server.pipeline(transaction=False)
    pipe.hgetall(breaker_key(spider))
    pipe.hgetall(breaker_failures_key(spider))
    raw_states, raw_failures = pipe.execute()
    failures: dict[str, dict[str, int]] = {}
    for raw_name, raw_count in raw_failures.items():
        host, _, scope = reply_text(raw_name).partition("|!")
        failures.setdefault(host, {})[scope] = int(raw_count)
    found = []
    for raw_host, raw_state in raw_states.items():
        host = reply_text(raw_host)
        level, _incident, until = reply_text(raw_state).split()[:3]
        found.append(HostState(host, int(level), float(until), failures.get(host, {})))
    return sorted(found, key=lambda state: (-state.until, state.host))
