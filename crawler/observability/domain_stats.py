"""Stats counted per domain, for at most DOMAIN_STATS_MAX domains of the fleet.

A worker counts requests, responses and items per domain (``domain/<host>/<stat>``, the fleet
monitor) and bans per domain (``ban/domain/<host>``, the ban middleware). Each named domain is
stats keys in every worker, fields of the fleet's ``{spider}:stats`` hash and series of each
worker's ``/metrics``: a crawl of many sites would grow all three with every host it meets.

So the fleet names at most DOMAIN_STATS_MAX domains, the first its workers publish: the
publish script (``publisher.py``) adds a new host to the set ``<stats key>:domains`` while it
has room, and writes the counts of any other host under the domain OTHER, ``(other)``. A host
a worker met since its last publish is counted under its own name until then; once the fleet
says it is not named, the worker moves its counts to ``(other)`` (:func:`fold`), and, the set
being full, counts new hosts' requests, responses and items there at once (their bans at its
next publish). Every worker names the same domains (give them the same DOMAIN_STATS_MAX), so a
named domain's fleet counts are whole, and every count is somewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

DOMAIN_PREFIX = "domain/"
BAN_PREFIX = "ban/domain/"
# The name the domains beyond DOMAIN_STATS_MAX are counted under.
OTHER = "(other)"


def domain_stat(host: str, name: str) -> str:
    """The stats key of a per-domain counter, e.g. ``domain/example.com/request_count``."""
    return f"{DOMAIN_PREFIX}{host or '-'}/{name}"


def host_of(stat: str) -> str | None:
    """The host a per-domain stats key counts for (None for another key)."""
    if stat.startswith(DOMAIN_PREFIX):
        return stat[len(DOMAIN_PREFIX) :].partition("/")[0]
    if stat.startswith(BAN_PREFIX):
        return stat[len(BAN_PREFIX) :]
    return None


def as_other(stat: str) -> str:
    """``stat`` counted for OTHER instead of its host."""
    if stat.startswith(DOMAIN_PREFIX):
        return f"{DOMAIN_PREFIX}{OTHER}/{stat[len(DOMAIN_PREFIX) :].partition('/')[2]}"
    return f"{BAN_PREFIX}{OTHER}"


class DomainNames:
    """The fleet's named domains as this worker last heard, and the name a host is counted
    under now: its own unless the fleet's set is full without it."""

    def __init__(self) -> None:
        self.named: set[str] = set()
        self.full = False

    def __call__(self, host: str) -> str:
        host = host or "-"  # as domain_stat names it
        if self.full and host not in self.named:
            return OTHER
        return host

    def heard(self, named: Iterable[str], full: bool) -> None:
        """What a publish said: hosts named, and whether the set is full (it may be emptied
        again: ``scrapy frontier purge``)."""
        self.named.update(named)
        self.full = full


def fold(stats: dict[str, Any], sent: dict[str, Any], hosts: set[str]) -> None:
    """Move the counts of ``hosts``, which the fleet does not name, to OTHER in a worker's
    ``stats``, and what of them was published (``sent``, the publisher's) with them: the fleet
    counted that under OTHER already, and the rest goes there with the next deltas."""
    # list(stats) first: a pipeline's writer thread may add a key meanwhile.
    for stat in [stat for stat in list(stats) if host_of(stat) in hosts]:
        other = as_other(stat)
        stats[other] = stats.get(other, 0) + stats.pop(stat)
        if stat in sent:
            sent[other] = sent.get(other, 0) + sent.pop(stat)
