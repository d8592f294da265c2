"""The send gate: the last check before a paced request leaves for its host.

The pop plans a paced request's turn with its host's bucket (``scripts/bucket.lua``), but a
planned turn may be used late: the request waits for a free download slot, or for the pop that
leases it. Sent late, it would bunch with the host's next turn, used on time. So a request whose
host is paced goes only with one of the bucket's tokens, taken as it goes, by the last
downloader middleware (``SendGateMiddleware``) with ``scripts/take.lua``, the script the ban
middleware takes its tokens with: no request reaches a host sooner than its rate, burst,
per-domain rate, Crawl-delay or ban-lowered rate allow, for the whole fleet.

The requests that reach the gate in one turn of the reactor take their tokens in one round trip,
together, just before they go: a round trip of its own for each, blocking the reactor in turn,
would send the first ones long after their tokens were taken, and the host's next request,
sent on time, would reach it too soon after them.

Between its token and the host a request still passes a few turns of the reactor (and, the
first time a worker sends a host a request for a while, the opening of a connection): on a busy
worker, tenths of a second. So a token counts as taken that much later, for the host's next
request from any worker: LAG_TURNS times the reactor's lag as the gate last measured it (the
time its round trip waited for its turn: about nothing on an idle worker), plus
CONNECT_ALLOWANCE for a first request. A request that still went on later than that (the worker
stalled between the gate and the downloader) tells the bucket as it reaches the downloader
(``SendGate.sent_late``, ``scripts/sent_late.lua``): it counts as sent then, so the host's next
request, from any worker, comes one interval after it, as Scrapy's own download delay counts
from when a request leaves for the download handler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy.utils.httpobj import urlparse_cached

from crawler.frontier.lua import SENT_LATE, TAKE, queue_eval
from crawler.meta import SENT_META, crawl_delay_of

if TYPE_CHECKING:
    from scrapy import Request

    from crawler.connection import RedisClient
    from crawler.frontier.pacing import Pacing


# Seconds a worker's first request to a host (for IDLE_CONNECTION seconds) may take to reach it
# after its token: a connection to open first.
CONNECT_ALLOWANCE = 0.5
# Seconds after which a worker's connection to a host counts as closed (Twisted's pool keeps an
# idle one 240 s; less, for servers that close theirs sooner).
IDLE_CONNECTION = 60.0
# Hosts whose last grant a worker keeps before it forgets those too old to matter.
KNOWN_HOSTS = 10_000
# Turns of the reactor a request with its token passes before it is on the wire; how fast the
# lag measured falls back once the reactor is idle again (its share kept at each round trip).
LAG_TURNS = 3
LAG_KEPT = 0.9
# Seconds a request may leave after the time its token counted before the bucket is told.
LATE_SLACK = 0.01


@dataclass
class _Ask:
    key: str
    rate: float
    burst: float
    allowance: float
    answer: asyncio.Future[float]
    counted: float = 0.0  # when the bucket counts the request sent, if granted (Unix time)


class SendGate:
    """Takes the token of a request's host, ``<buckets><host>|<identity>``, for ``pacing``."""

    def __init__(self, server: RedisClient, buckets: str, pacing: Pacing) -> None:
        self.server = server
        self.buckets = buckets
        self.pacing = pacing
        self._asks: list[_Ask] = []
        self._granted: dict[str, float] = {}  # host: when this worker last sent it a request
        self._asked_at = 0.0  # when the first ask waiting was made (monotonic)
        self._late: list[list[Any]] = []  # sent_late.lua's key and arguments, waiting
        self.lag = 0.0  # seconds the reactor took to come to the gate's round trip, lately
        # Queues a read that rides the gate's round trip (the pause's), or None; its reader.
        self.along: Callable[[Any], Callable[[list[Any]], None] | None] | None = None

    async def wait(self, request: Request) -> float:
        """0 when ``request`` may go now (its token is taken), else the seconds until its host's
        next token. Raises RedisError while Redis is away: no request goes unchecked."""
        host = urlparse_cached(request).hostname or ""
        rate, burst = self.pacing.rate_of(host, crawl_delay_of(request.meta))
        if rate <= 0 or not host:
            return 0.0
        loop = asyncio.get_running_loop()
        key = f"{self.buckets}{host}|{self.pacing.identity}"
        ask = _Ask(key, rate, burst, self._allowance(host), loop.create_future())
        self._asks.append(ask)
        self._trip_soon()
        wait = await ask.answer
        if wait <= 0:
            self._granted[host] = time.monotonic()
            request.meta[SENT_META] = [ask.counted, ask.allowance > 0]
        return wait

    def sent_late(self, request: Request, left: float, answered: bool = False) -> bool:
        """Tell the bucket of ``request``'s host, granted its token here, that the request went
        on at ``left`` (Unix time) if that is later than the bucket counted; whether it was.
        It goes with the gate's round trip of this turn of the reactor. Called as the request
        reaches the downloader, and, for a worker's first request to the host (a connection to
        open first, which a starved worker may take longer than CONNECT_ALLOWANCE to do), again
        as its answer's headers arrive (``answered``): the request reached the host by then."""
        sent = request.meta.get(SENT_META)
        if not isinstance(sent, list):
            return False
        counted, first = float(sent[0]), bool(sent[1])
        if answered or not first:
            del request.meta[SENT_META]  # this request's last notice
        if left <= counted + LATE_SLACK:
            return False
        host = urlparse_cached(request).hostname or ""
        rate, burst = self.pacing.rate_of(host, crawl_delay_of(request.meta))
        key = f"{self.buckets}{host}|{self.pacing.identity}"
        self._late.append([key, left, counted, rate, burst, self.pacing.recovery])
        self._trip_soon()
        return True

    def _trip_soon(self) -> None:
        """The gate's round trip, once the requests of this turn of the reactor are in."""
        if len(self._asks) + len(self._late) == 1:
            self._asked_at = time.monotonic()
            asyncio.get_running_loop().call_soon(self._take)

    def _allowance(self, host: str) -> float:
        """CONNECT_ALLOWANCE when this worker has not sent ``host`` a request lately."""
        now = time.monotonic()
        if now - self._granted.get(host, -IDLE_CONNECTION) < IDLE_CONNECTION:
            return 0.0
        if len(self._granted) >= KNOWN_HOSTS:
            self._granted = {h: t for h, t in self._granted.items() if now - t < IDLE_CONNECTION}
        return CONNECT_ALLOWANCE

    def _take(self) -> None:
        """One round trip for the late requests told (first: the asks' tokens come after them)
        and every waiting ask, each ask told its wait (or the error). A late request's notice
        Redis does not take is dropped: with Redis away, no token is given either."""
        asks, self._asks = self._asks, []
        told, self._late = self._late, []
        self.lag = max(time.monotonic() - self._asked_at, self.lag * LAG_KEPT)
        now, recovery = time.time(), self.pacing.recovery
        late = LAG_TURNS * self.lag
        pipe = self.server.pipeline(transaction=False)
        read_along = self.along(pipe) if self.along is not None else None
        first = len(pipe)
        for key, *args in told:
            queue_eval(pipe, SENT_LATE, [key], args)
        for ask in asks:
            ask.counted = now + ask.allowance + late
            args = [now, ask.rate, ask.burst, 1, recovery, 1, 0, ask.allowance + late]
            queue_eval(pipe, TAKE, [ask.key], args)
        queued = len(pipe)
        try:
            replies: list[Any] = pipe.execute(raise_on_error=False)
        except RedisError as exc:
            replies = [exc] * queued
        if read_along is not None:
            read_along(replies[:first])
        replies = replies[first + len(told) :]
        for ask, reply in zip(asks, replies, strict=True):
            if ask.answer.done():
                continue
            if isinstance(reply, Exception):
                ask.answer.set_exception(reply)
            else:
                granted, wait = int(reply[0]), float(reply[1])
                ask.answer.set_result(0.0 if granted else max(0.001, wait))
