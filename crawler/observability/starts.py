"""How the last launches of ``scrapy fleet autoscale`` went, kept in ``{spider}:fleet:starts``
(crawler/fleet/backoff.py writes it): the launches in a row that failed to start (an EC2
instance whose worker never sent a heartbeat, a local worker that exited with an error at once:
a broken install target, secrets it could not read, a setting it refused), and the hold on
launches they brought. ``scrapy status`` shows it, and ``scrapy status --serve``'s ``/metrics``
exports it:

- ``crawler_fleet_failed_starts{spider}``: launches in a row that failed to start;
- ``crawler_fleet_launches_held{spider}``: 1 while the autoscaler holds its launches back for
  them (none at all until ``held_until``, then one at a time until a worker reports), else 0;
- ``crawler_fleet_launches_held_until_seconds{spider}``: when the current hold ends (Unix time),
  while it lasts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

from crawler.connection import reply_hash, reply_text
from crawler.keys import starts_key
from crawler.observability.rates import format_duration

if TYPE_CHECKING:
    from crawler.connection import RedisClient

# Seconds the record is kept after its last change (a hold lasts a day at most).
STARTS_TTL = 7 * 86_400


@dataclass(frozen=True)
class Starts:
    """The launches in a row that failed to start, and the hold they brought."""

    failed: int = 0  # launches in a row that failed to start
    holds: int = 0  # holds in this row; while above 0, launches are held back
    held_until: float = 0.0  # Unix time the current hold ends; after it, one at a time
    since: float = 0.0  # when the first of them was launched (Unix time)

    def held(self, now: float) -> bool:
        """Whether no launch may go now."""
        return now < self.held_until

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "failed_starts": self.failed,
            "holds": self.holds,
            "held": self.held(now),
            "held_until": self.held_until if self.held(now) else None,
            "since": self.since or None,
        }


def read_starts(server: RedisClient, spider: str) -> Starts:
    """The record of ``spider``'s launches; one written by another tool reads as no failure
    where a field is not a finite number at least 0."""
    raw: Any = server.hgetall(starts_key(spider))
    return starts_from(reply_hash(raw))


def starts_from(raw: Mapping[Any, Any]) -> Starts:
    """A ``{spider}:fleet:starts`` hash read (see :func:`read_starts`)."""
    fields = {
        reply_text(name, "replace"): reply_text(value, "replace") for name, value in raw.items()
    }
    failed, holds = _count(fields.get("failed")), _count(fields.get("holds"))
    return Starts(failed, holds, _time(fields.get("held_until")), _time(fields.get("since")))


def _count(text: str | None) -> int:
    try:
        value = int(text or 0)
    except ValueError:
        return 0
    return max(0, value)


def _time(text: str | None) -> float:
    try:
        value = float(text or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def write_starts(server: RedisClient, spider: str, starts: Starts) -> None:
    """Keep ``starts`` (STARTS_TTL seconds); no failure left forgets the record."""
    key = starts_key(spider)
    if starts == Starts():
        server.delete(key)
        return
    pipe = server.pipeline(transaction=False)
    pipe.hset(key, mapping=_fields(starts))
    pipe.expire(key, STARTS_TTL)
    pipe.execute()


def _fields(starts: Starts) -> dict[Any, Any]:
    return {
        "failed": str(starts.failed),
        "holds": str(starts.holds),
        "held_until": repr(starts.held_until),
        "since": repr(starts.since),
    }


def starts_text(starts: Mapping[str, Any], now: float) -> str:
    """What the launches' record says (:meth:`Starts.to_json`), one line ("" with no failure)."""
    if not starts.get("failed_starts"):
        return ""
    failed = (
        f"{starts['failed_starts']} launches in a row failed to start (no heartbeat within "
        "FLEET_WORKER_GRACE, or a local worker exiting with an error at once)"
    )
    if starts.get("held_until"):
        until = time.strftime("%H:%M:%S", time.localtime(starts["held_until"]))
        left = format_duration(max(0.0, starts["held_until"] - now))
        return f"held until {until} ({left} left): {failed}"
    if starts.get("holds"):
        return f"held, one launch at a time until a worker reports: {failed}"
    return failed


def starts_metrics(records: Mapping[str, Starts], now: float) -> list[Metric]:
    """The launches' gauges of each spider of ``records``."""
    failed = _gauge("crawler_fleet_failed_starts", "Launches in a row that failed to start.")
    held = _gauge("crawler_fleet_launches_held", "1 while the autoscaler holds launches back.")
    until = _gauge(
        "crawler_fleet_launches_held_until_seconds", "When the hold on launches ends, Unix time."
    )
    for spider, starts in records.items():
        failed.add_metric([spider], starts.failed)
        held.add_metric([spider], int(starts.holds > 0))
        if starts.held(now):
            until.add_metric([spider], starts.held_until)
    return [failed, held, until]


def _gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=("spider",))
