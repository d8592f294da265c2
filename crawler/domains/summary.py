"""What a sweep found so far, from the fleet's stats (``{domains}:stats``).

The spider counts every stored domain as ``domains/status/<class>`` and ``domains/code/<code>``
(bounded: a dozen classes, a few hundred codes). :func:`summarize` turns those counters into
counts per class and per code and the dead share by the seed's rule (not accessible: code 1000,
0, 404 or 5xx; crawler/domains/classify.py), for ``scrapy status domains``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler.domains.classify import accessible

STATUS_PREFIX = "domains/status/"
CODE_PREFIX = "domains/code/"


@dataclass
class DomainsSummary:
    by_class: dict[str, int] = field(default_factory=dict)
    by_code: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_code.values())

    @property
    def dead(self) -> int:
        return sum(count for code, count in self.by_code.items() if not accessible(code))

    @property
    def dead_share(self) -> float:
        return self.dead / self.total if self.total else 0.0


def summarize(stats: Mapping[Any, Any]) -> DomainsSummary:
    """The summary of a flat stats mapping (a worker's stats or the fleet's hash, str or bytes
    keys, numbers or their text)."""
    summary = DomainsSummary()
    for raw_name, raw_value in stats.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        value = _count(raw_value)
        if value is None:
            continue
        if name.startswith(STATUS_PREFIX):
            summary.by_class[name.removeprefix(STATUS_PREFIX)] = value
        elif name.startswith(CODE_PREFIX) and name.removeprefix(CODE_PREFIX).isdigit():
            summary.by_code[int(name.removeprefix(CODE_PREFIX))] = value
    return summary


def _count(value: Any) -> int | None:
    try:
        return int(float(value.decode() if isinstance(value, bytes) else value))
    except (TypeError, ValueError):
        return None
