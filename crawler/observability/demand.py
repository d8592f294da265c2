"""What the queued work allows, read from the head of the queue at a bounded cost.

One script (``scripts/demand.lua``) reads at most ``sample`` queued requests in pop order and
answers, per host among them, how many it holds, its rate now and the tokens its bucket has to
spare; the head of the start list (START_SAMPLE entries at most) is read alongside (start
entries that name a URL count for their host, others as unlimited work). Each host's share of
the sample stands for its share of the whole queue. From that:

- **ready**: requests that may go now: every request of an unlimited host, and of a paced host
  as many as its spare tokens;
- **ceiling**: the requests per second the work allows, the sum over hosts of the lesser of the
  host's rate and what its backlog needs (its requests over ``seconds``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawler.connection import reply_text
from crawler.frontier import lua
from crawler.frontier.pacing import NO_PACING
from crawler.keys import pause_key

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
    """One host of the sample: its requests there, rate now (0: unlimited) and spare tokens."""

    host: str
    count: int
    rate: float = 0.0
    spare: int = -1


@dataclass(frozen=True)
class Demand:
    """The queue's hosts as its head shows them, scaled to the whole queue and start list."""

    queued: int
    sampled: int
    hosts: tuple[HostDemand, ...] = ()
    start: int = 0
    start_sampled: int = 0
    start_hosts: tuple[HostDemand, ...] = ()
    leased: int = 0  # requests the workers held when the queue was looked at
    paused: bool = False  # the crawl is paused ({spider}:paused): no work may go

    def estimated(self) -> dict[str, tuple[float, HostDemand]]:
        """Host -> (its requests in the queue and start list, estimated; what the queue's
        sample says of it)."""
        found: dict[str, tuple[float, HostDemand]] = {}
        for hosts, total, sampled in (
            (self.hosts, self.queued, self.sampled),
            (self.start_hosts, self.start, self.start_sampled),
        ):
            scale = total / sampled if sampled else 0.0
            for entry in hosts:
                count, known = found.get(entry.host, (0.0, entry))
                found[entry.host] = (count + entry.count * scale, known)
        return found

    def ready(self) -> float:
        """Requests that may go now: unlimited hosts' all, paced hosts' up to their tokens."""
        return sum(
            count if entry.rate <= 0 else min(count, max(0, entry.spare))
            for count, entry in self.estimated().values()
        )

    def ceiling(self, seconds: float, share: float = 1.0) -> float:
        """Requests per second the work allows: per host the lesser of its rate and its
        backlog (times ``share``: a part or a multiple of the work) over ``seconds``."""
        return sum(
            count * share / seconds if entry.rate <= 0 else min(entry.rate, count * share / seconds)
            for count, entry in self.estimated().values()
        )


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
    lua.queue_eval(pipe, DEMAND, keys.script_keys(keys.demand, keys.leases), args)
    pipe.lrange(keys.start, 0, min(sample, START_SAMPLE) - 1)
    pipe.exists(pause_key(keys.spider))  # any value pauses (frontier/pause.py)


def read_demand(
    replies: list[Any],
    start: int,
    pacing: Pacing | None,
    host_of: Callable[[str], str] | None = None,
) -> Demand:
    """The :func:`queue_demand` replies; ``start`` the start list's length; ``host_of`` tells a
    start entry's host ("" unknown; by default a URL's, see :func:`entry_host`)."""
    raw, entries, paused = replies
    hosts = tuple(
        HostDemand(reply_text(raw[i]), int(raw[i + 1]), float(raw[i + 2]), int(raw[i + 3]))
        for i in range(3, len(raw), 4)
    )
    start_hosts = _start_hosts(entries, pacing, host_of or entry_host)
    queued, leased, sampled = (int(value) for value in raw[:3])
    return Demand(queued, sampled, hosts, start, len(entries), start_hosts, leased, bool(paused))


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


def entry_host(entry: str) -> str:
    """The host a start entry names: a URL's, or a JSON object's ``url``; "" when none."""
    text = entry.strip()
    if text.startswith("{"):
        try:
            text = str(json.loads(text).get("url") or "")
        except (ValueError, AttributeError):
            return ""
    try:
        return (urlsplit(text).hostname or "").lower()
    except ValueError:
        return ""
