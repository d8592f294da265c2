"""The send gate: the last check before a paced request leaves for its host.

The pop plans a paced request's turn (``scripts/bucket.lua``), but a planned turn may be used
late (no free download slot, a busy reactor), and would then bunch with the host's next turn.
So the last downloader middleware (``SendGateMiddleware``) takes one of the host's tokens as the
request goes (``scripts/take.lua``, the ban middleware's script too): no request reaches a host
sooner than its rate, burst, Crawl-delay or ban-lowered rate allow, for the whole fleet. The
requests of one reactor turn take their tokens in one round trip, just before they go.

A token counts as taken a little later than it was: LAG_TURNS times the reactor's lag as the
gate last measured it, plus CONNECT_ALLOWANCE for a worker's first request to a host. A request
still later than that tells the bucket (``SendGate.sent_late``, ``scripts/sent_late.lua``) as it
reaches the downloader and, for a first request, as its answer's headers arrive: it counts as
sent then, and the host's next token comes one interval after it.
"""

from __future__ import annotations

import asyncio
import time
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
        if not answered:
            # From the downloader to the wire it still passes turns of the reactor, as a
            # request from the gate does: counted sent that much later.
            left += LAG_TURNS * self.lag
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
        for key, *args in told:
            queue_eval(pipe, SENT_LATE, [key], args)
        asked: set[str] = set()
        for ask in asks:
            ask.counted = now + ask.allowance + late
            # A host's second ask of this trip on, turned away, moves to the host's first turn
            # not planned (take.lua's ``plan``): requests that come together (held for the same
            # token) leave one by one, instead of all coming back at the next token to be
            # turned away again but one.
            plan = int(ask.key in asked)
            asked.add(ask.key)
            args = [now, ask.rate, ask.burst, 1, recovery, 1, 0, ask.allowance + late, plan]
            queue_eval(pipe, TAKE, [ask.key], args)
        try:
            replies: list[Any] = pipe.execute(raise_on_error=False)[len(told) :]
        except RedisError as exc:
            replies = [exc] * len(asks)
        for ask, reply in zip(asks, replies, strict=True):
            if ask.answer.done():
                continue
            if isinstance(reply, Exception):
                ask.answer.set_exception(reply)
            else:
                granted, wait = int(reply[0]), float(reply[1])
                ask.answer.set_result(0.0 if granted else max(0.001, wait))
