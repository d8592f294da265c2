"""The counters worth watching, read out of a flat Scrapy stats mapping.

The same reading serves a worker's own stats (``/metrics``) and the fleet's ``{spider}:stats``
hash (``scrapy status``). Per-domain counters are stats this package adds:
``domain/<host>/request_count``, ``domain/<host>/response_status_count/<status>`` and
``domain/<host>/item_scraped_count``, for DOMAIN_STATS_MAX domains at most by name and the
others under ``(other)`` (:mod:`crawler.observability.domain_stats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from crawler.observability.domain_stats import BAN_PREFIX, DOMAIN_PREFIX


def numeric(stats: Mapping[str, Any]) -> dict[str, int | float]:
    """The int and float values of ``stats`` (bools, datetimes and text left out)."""
    return {
        name: value
        for name, value in stats.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


@dataclass
class DomainCounters:
    requests: int = 0
    responses_by_status: dict[str, int] = field(default_factory=dict)
    items: int = 0

    @property
    def responses(self) -> int:
        return sum(self.responses_by_status.values())


@dataclass
class Counters:
    """Totals of one worker or of a whole fleet."""

    requests: int = 0
    responses_by_status: dict[str, int] = field(default_factory=dict)
    download_errors: int = 0
    items: int = 0
    items_by_collection: dict[str, int] = field(default_factory=dict)
    items_dropped: int = 0
    retries: int = 0
    bans: int = 0
    bans_by_rule: dict[str, int] = field(default_factory=dict)
    bans_by_domain: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    domains: dict[str, DomainCounters] = field(default_factory=dict)

    @property
    def responses(self) -> int:
        return sum(self.responses_by_status.values())

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any]) -> Counters:
        values = numeric(stats)
        return cls(
            requests=_int(values, "downloader/request_count"),
            responses_by_status=_by_prefix(values, "downloader/response_status_count/"),
            download_errors=_int(values, "downloader/exception_count"),
            items=_int(values, "item_scraped_count"),
            items_by_collection=_by_prefix(values, "mongo/items/"),
            items_dropped=_int(values, "item_dropped_count"),
            retries=_int(values, "retry/count"),
            bans=_int(values, "ban/count"),
            bans_by_rule=_by_prefix(values, "ban/rule/"),
            bans_by_domain=_by_prefix(values, BAN_PREFIX),
            dead_letters=_int(values, "frontier/dead"),
            dead_letters_by_reason=_by_prefix(values, "frontier/dead/"),
            duplicates=_int(values, "dupefilter/filtered"),
            domains=_domains(values),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["responses"] = self.responses
        for name, domain in self.domains.items():
            data["domains"][name]["responses"] = domain.responses
        return data


def _int(values: Mapping[str, int | float], name: str) -> int:
    return int(values.get(name, 0))


def _by_prefix(values: Mapping[str, int | float], prefix: str) -> dict[str, int]:
    return {
        name[len(prefix) :]: int(value)
        for name, value in sorted(values.items())
        if name.startswith(prefix) and "/" not in name[len(prefix) :]
    }


def _domains(values: Mapping[str, int | float]) -> dict[str, DomainCounters]:
    domains: dict[str, DomainCounters] = {}
    for name, value in sorted(values.items()):
        if not name.startswith(DOMAIN_PREFIX):
            continue
        host, _, stat = name[len(DOMAIN_PREFIX) :].partition("/")
        domain = domains.setdefault(host, DomainCounters())
        if stat == "request_count":
            domain.requests = int(value)
        elif stat == "item_scraped_count":
            domain.items = int(value)
        elif stat.startswith("response_status_count/"):
            domain.responses_by_status[stat.rpartition("/")[2]] = int(value)
    return domains
