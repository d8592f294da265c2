"""Chains: a page whose next page is on its own host, fetched on turns taken ahead.

A feed read page by page (explore's cursor pages) is one chain: each page's next request is
known only once the page arrives, and, paced fleet-wide, it needs its host's turn from Redis
before it may go. Asked one by one, that is a round trip per page. Instead, once a worker's
page made a request for its own host (``dont_filter``: the duplicate filter, in Redis, is not
asked), the worker takes some of that host's turns ahead (``scripts/credit.lua``: the turns
due within the pop's look-ahead, from the host's token bucket the pops use too, so the host
is paced for the whole fleet as before) with as many queue ids. The next requests its pages
make for that host each take such a turn and are held until it comes, without a round trip
(the send gate then takes the host's token as each goes, see ``gate.py``); each is written
as leased to the worker (``scripts/settle.lua``) with its next round trip, before the
acknowledgement of the page that made it. So a worker that dies leaves the page that made it
leased, to come back to the queue and make it again: nothing is lost.

A turn not used within one interval of its time is gone (the host is left alone for it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawler.connection import reply_text
from crawler.frontier import lua
from crawler.frontier.outbox import Adopted, adopted
from crawler.frontier.pacing import domain_rate
from crawler.frontier.records import pending
from crawler.meta import DUE_META, crawl_delay_of

if TYPE_CHECKING:
    from scrapy import Request

    from crawler.frontier.pacing import Pacing
    from crawler.frontier.queue import Frontier

# Turns one host's credit holds at most (they are also bound by the pop's look-ahead).
MOST_TURNS = 16
# Meta key the lease spider middleware sets on a request a page made for the page's own host
# (the scheduler takes it off): only such a request may take a turn taken ahead.
CHAIN_META = "frontier_chain"


@dataclass
class Turn:
    """A turn of a host taken ahead: its queue sequence number and time (Unix)."""

    seq: int
    at: float


def _host(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https"):
        return None
    return parts.hostname or None


def paced(pacing: Pacing, host: str) -> bool:
    """Whether ``host``'s requests take turns: a rate of 0, the host's own or else the
    default, is unlimited (as the pop and credit scripts read it)."""
    return domain_rate(pacing.per_domain, host, pacing.rate) > 0


def mark_chain(request: Request, parent: Request) -> None:
    """Mark ``request``, made by the page of ``parent``, when it is for the same host."""
    if request.dont_filter and _host(request.url) == _host(parent.url) is not None:
        request.meta[CHAIN_META] = True


def chain_host(request: Request) -> str | None:
    """The host whose turn ``request`` may take ahead (its mark is taken off), or None when it
    must go through the queue: not made by a page of its host, filtered as a duplicate (the
    fleet's filter is in Redis), due later, or with a Crawl-delay of its own."""
    if not request.meta.pop(CHAIN_META, None) or not request.dont_filter:
        return None
    if request.meta.get(DUE_META) or crawl_delay_of(request.meta):
        return None
    return _host(request.url)


class Credits:
    """The turns this worker took ahead, per host, and the hosts it wants turns of."""

    def __init__(self) -> None:
        self._turns: dict[str, list[Turn]] = {}
        self._interval: dict[str, float] = {}
        self.wanted: set[str] = set()
        # Hosts asked for turns and given none: every turn taken until then (Unix time).
        self._booked: dict[str, float] = {}

    def take(self, host: str) -> Turn | None:
        """The host's next turn not yet gone, or None (the host is then wanted: its next
        requests take turns ahead again). The last turn taken asks for more."""
        turns = self._turns.get(host, [])
        late = time.time() - self._interval.get(host, 0.0)
        while turns and turns[0].at < late:
            turns.pop(0)
        if len(turns) <= 1:
            self.wanted.add(host)
            self._turns.pop(host, None)  # a host seen once (a sweep) is not kept
        return turns.pop(0) if turns else None

    def queue_ask(
        self, pipe: Any, frontier: Frontier, pacing: Pacing | None, after: bool = True
    ) -> list[str]:
        """Queue on ``pipe`` the ask for the wanted hosts' turns, behind the requests queued
        already (``after``: the pop of this trip placed them, never with a push but a pop's);
        returns the hosts asked."""
        if pacing is None or not self.wanted or not after:
            return []
        hosts, self.wanted = sorted(self.wanted), set()
        self._forget_gone()
        keys = frontier.keys
        args = [keys.queue_prefix, time.time(), MOST_TURNS, len(hosts), *hosts]
        args += pacing.script_args(keys.buckets)
        lua.queue_eval(pipe, lua.CREDIT, keys.script_keys(), args)
        return hosts

    def booked(self, host: str) -> bool:
        """Whether the host's turns were all taken for the look-ahead when last asked: a new
        request of its chain would most likely wait in Redis behind others however soon it
        went there (it may lose a turn that came free meanwhile: the host has others)."""
        return self._booked.get(host, 0.0) > time.time()

    def given(self, reply: Any, asked: list[str] | None = None, ahead: float = 0.0) -> int:
        """Keep the turns a credit ask's ``reply`` gave; returns how many. A host ``asked``
        and given none has no turn free within the look-ahead (``ahead`` seconds)."""
        count = 0
        now = time.time()
        for host in asked or []:
            self._booked[host] = now + ahead
        for host, first, rate, times in reply or []:
            name, start = reply_text(host), int(first)
            self._booked.pop(name, None)
            ats = [float(at) for at in reply_text(times).split(",")]
            self._interval[name] = 1 / float(rate)
            turns = self._turns.setdefault(name, [])
            turns.extend(Turn(start + n, at) for n, at in enumerate(ats))
            turns.sort(key=lambda turn: turn.at)
            count += len(ats)
        return count

    def _forget_gone(self) -> None:
        """Forget the hosts whose turns have all gone by (their chains ended)."""
        now = time.time()
        for host, turns in list(self._turns.items()):
            if not turns or turns[-1].at < now - self._interval.get(host, 0.0):
                del self._turns[host]
        for host in set(self._interval) - set(self._turns) - self.wanted:
            del self._interval[host]
        for host, until in list(self._booked.items()):
            if until <= now:
                del self._booked[host]

    def not_given(self, hosts: list[str]) -> None:
        """An ask that failed: its hosts are wanted again."""
        self.wanted.update(hosts)

    def clear(self) -> None:
        self._turns.clear()
        self.wanted.clear()
        self._booked.clear()


def keep_on_turn(
    credits: Credits, pacing: Pacing | None, request: Request, host: str | None, spider: Any
) -> tuple[Adopted, float] | None:
    """A request a page made for its own host, kept on a turn of that host this worker took
    ahead: what to write as leased to this worker with the next trip, and the turn's time
    (Unix) to hold it until; None when it goes through the queue."""
    if host is None or pacing is None or not paced(pacing, host):
        return None
    if (turn := credits.take(host)) is None:
        return None
    kept = adopted(turn.seq, request.priority, pending(request, b"", spider).json)
    return kept, turn.at
