"""Stats counted per domain, with a bounded number of domains.

A worker counts requests, responses and items per domain (``domain/<host>/...``, the fleet
monitor) and bans per domain (``ban/domain/<host>``, the ban middleware). Each named domain
is a few stats keys in the worker, fields of the fleet's ``{spider}:stats`` hash and series of
its ``/metrics``, so a crawl of many sites would grow all three with every host it meets. A
worker names at most DOMAIN_STATS_MAX domains, the first it meets; any other domain is
counted under the name OTHER, ``(other)``, so the totals still add up.
"""

from __future__ import annotations

DOMAIN_PREFIX = "domain/"
# The name the domains beyond a worker's DOMAIN_STATS_MAX are counted under.
OTHER = "(other)"


def domain_stat(host: str, name: str) -> str:
    """The stats key of a per-domain counter, e.g. ``domain/example.com/request_count``."""
    return f"{DOMAIN_PREFIX}{host or '-'}/{name}"


class DomainNames:
    """The name a domain is counted under: itself while this worker has named fewer than
    ``most`` domains (or named it already), else OTHER."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._named: set[str] = set()

    def __call__(self, domain: str) -> str:
        if domain in self._named:
            return domain
        if len(self._named) >= self.most:
            return OTHER
        self._named.add(domain)
        return domain
