"""What the waiting work allows, read from the heads of the queue and the delayed set at a
bounded cost.

One script (``scripts/demand.lua``) reads at most ``sample`` queued requests in pop order and
as many delayed ones (retries, cool-downs and politeness turns: a polite crawl holds most of
its work there), and answers, per host among them, how many it holds in each, its rate now and
the tokens its bucket has to spare; the head of the start list (START_SAMPLE entries at most)
is read alongside (start entries that name a URL count for their host, others as unlimited
work). Each host's share of a sample stands for its share of the whole queue (or delayed set).
From that:

- **ready**: requests that may go now: every queued request of an unlimited host, and of a
  paced host as many as its spare tokens (a delayed request waits: never ready);
- **ceiling**: the requests per second the work allows, the sum over hosts of the lesser of the
  host's rate and what its backlog (queued and delayed) needs (its requests over ``seconds``);
- **slowest**: the seconds the paced host with the most work per its rate takes for it, however
  many workers go.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.connection import reply_text
from crawler.frontier import lua
from crawler.frontier.pacing import NO_PACING
from crawler.keys import pause_key
from crawler.spiders.entry_hosts import url_entry_host

if TYPE_CHECKING:
    from crawler.frontier.pacing import Pacing
    from crawler.keys import FrontierKeys

# Queued requests one look reads at most (in Lua: the records never leave Redis).
DEFAULT_SAMPLE = 1000
# Start entries one look reads at most (sent to the reader: a few dozen KB at most).
START_SAMPLE = 200

# What the queue's head allows: its hosts, their rates and spare tokens (read only).
DEMAND = lua.PRELUDE + lua.BUCKET + lua.PACE + lua.read_script("demand", "crawler.observability")


@dataclass(frozen=True)
class HostDemand:
    """One host of the samples: its requests in the queue's, rate now (0: unlimited), spare
    tokens and its requests in the delayed set's."""

    host: str
    count: int
    rate: float = 0.0
    spare: int = -1
    delayed: int = 0


@dataclass(frozen=True)
class Demand:
    """The hosts as the heads of the queue, the delayed set and the start list show them,
    scaled to the whole of each."""

    queued: int
    sampled: int
    hosts: tuple[HostDemand, ...] = ()
    start: int = 0
    start_sampled: int = 0
    start_hosts: tuple[HostDemand, ...] = ()
    leased: int = 0  # requests the workers held when the queue was looked at
    paused: bool = False  # the crawl is paused ({spider}:paused): no work may go
    delayed: int = 0  # requests in the delayed set
    delayed_sampled: int = 0  # of them, read

    def estimated(self, delayed: bool = True) -> dict[str, tuple[float, HostDemand]]:
        """Host -> (its requests in the queue, the delayed set (unless not ``delayed``) and
        the start list, estimated; what the samples say of it)."""
        found: dict[str, tuple[float, HostDemand]] = {}
        late = _scale(self.delayed, self.delayed_sampled) if delayed else 0.0
        for hosts, total, sampled in (
            (self.hosts, self.queued, self.sampled),
            (self.start_hosts, self.start, self.start_sampled),
        ):
            scale = _scale(total, sampled)
            for entry in hosts:
                count, known = found.get(entry.host, (0.0, entry))
                found[entry.host] = (count + entry.count * scale + entry.delayed * late, known)
        return found

    def ready(self) -> float:
        """Requests that may go now: unlimited hosts' queued, paced hosts' up to their tokens."""
        return sum(
            count if entry.rate <= 0 else min(count, max(0, entry.spare))
            for count, entry in self.estimated(delayed=False).values()
        )

    def ceiling(self, seconds: float, share: float = 1.0) -> float:
        """Requests per second the work allows: per host the lesser of its rate and its
        backlog (times ``share``: a part or a multiple of the work) over ``seconds``."""
        return sum(
            count * share / seconds if entry.rate <= 0 else min(entry.rate, count * share / seconds)
            for count, entry in self.estimated().values()
        )

    def slowest(self, share: float = 1.0) -> float:
        """Seconds the paced host with the most work for its rate takes for its backlog (times
        ``share``) at that rate, however many workers go; 0 when no host is paced."""
        return max(
            (
                count * share / entry.rate
                for count, entry in self.estimated().values()
                if entry.rate > 0
            ),
            default=0.0,
        )


def _scale(total: int, sampled: int) -> float:
    """Requests of the whole each request of a sample stands for."""
    return total / sampled if sampled else 0.0


def queue_demand(
    pipe: Any,
    keys: FrontierKeys,
    pacing: Pacing | None,
    sample: int = DEFAULT_SAMPLE,
    fresh: float = 0.0,
) -> None:
    """Queue on ``pipe`` the look at the queue's and the start list's heads and at the pause
    (three replies, read with :func:`read_demand`); the fleet's last look at the queue answers
    instead while it is younger than ``fresh`` seconds (0: look now)."""
    paced = NO_PACING if pacing is None else pacing.script_args(keys.buckets)
    args = [keys.queue_prefix, time.time(), sample, fresh, *paced]
    lua.queue_eval(pipe, DEMAND, keys.script_keys(keys.demand, keys.leases, keys.delayed), args)
    pipe.lrange(keys.start, 0, min(sample, START_SAMPLE) - 1)
    pipe.exists(pause_key(keys.spider))  # any value pauses (frontier/pause.py)


def read_demand(
    replies: list[Any],
    start: int,
    pacing: Pacing | None,
    host_of: Callable[[str], str] | None = None,
) -> Demand:
    """The :func:`queue_demand` replies; ``start`` the start list's length; ``host_of`` tells a
    start entry's host ("" unknown; by default a URL's, ``url_entry_host``)."""
    raw, entries, paused = replies
    hosts = tuple(
        HostDemand(
            reply_text(raw[i]), int(raw[i + 1]), float(raw[i + 3]), int(raw[i + 4]), int(raw[i + 2])
        )
        for i in range(5, len(raw), 5)
    )
    start_hosts = _start_hosts(entries, pacing, host_of or url_entry_host)
    queued, leased, sampled, delayed, delayed_sampled = (int(value) for value in raw[:5])
    return Demand(
        queued, sampled, hosts, start, len(entries), start_hosts, leased, bool(paused), delayed,
        delayed_sampled,
    )  # fmt: skip


def _start_hosts(
    entries: list[Any], pacing: Pacing | None, host_of: Callable[[str], str]
) -> tuple[HostDemand, ...]:
    counts: dict[str, int] = {}
    for entry in entries:
        try:
            host = host_of(reply_text(entry))
        except UnicodeDecodeError:  # not UTF-8: the spider sets it aside, it names no host
            host = ""
        counts[host] = counts.get(host, 0) + 1
    return tuple(_entry_demand(host, count, pacing) for host, count in counts.items())


def _entry_demand(host: str, count: int, pacing: Pacing | None) -> HostDemand:
    """Start entries of ``host``: its bucket is not read, taken as full (its burst to spare)."""
    if pacing is None or not host:
        return HostDemand(host, count)
    rate, burst = pacing.rate_of(host)
    return HostDemand(host, count, rate, int(burst)) if rate > 0 else HostDemand(host, count)
