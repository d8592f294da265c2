"""Launches held back while the workers launched never start.

A member that is gone without its worker ever having reported is a failed start: an EC2
instance with no heartbeat seen in FLEET_WORKER_GRACE seconds since its launch
(crawler/aws/engine.py), a local worker that exited with an error before a look saw it beat, or
soon after its start (crawler/fleet/local.py): a broken install target, secrets it could not
read, a setting it refused. Replaced as any gone member is, its replacement would fail the same
way, and the fleet would pay for instances that never crawl (or a machine would start
processes), for ever. So, after FLEET_START_FAILURES failed starts in a row, no launch for
FLEET_START_BACKOFF seconds; then one launch at a time, each that fails too holding launches
twice as long as the last hold (a day at most). A worker launched since the first of them that
reports ends it: launches go as wanted again (a worker launched before, still crawling with the
install that worked, says nothing of the new ones). The record is kept in Redis
(``crawler.observability.starts``), so one-step runs (``--once``) share it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from crawler.config import setting
from crawler.observability.starts import Starts

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.fleet.autoscaler import Member

# The longest hold, in seconds.
MOST_HOLD = 86_400.0


@dataclass(frozen=True)
class Backoff:
    """FLEET_START_FAILURES and FLEET_START_BACKOFF (docs/settings.md)."""

    failures: int = 3  # failed starts in a row before launches are held (0: never held)
    first: float = 1800.0  # seconds of the first hold

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Backoff:
        """FLEET_START_FAILURES and FLEET_START_BACKOFF as their rules read them (SettingsError
        naming a bad one); not set, the defaults."""
        failures = setting(settings, "FLEET_START_FAILURES")
        first = setting(settings, "FLEET_START_BACKOFF")
        return cls(
            cls.failures if failures is None else failures,
            cls.first if first is None else first,
        )

    def hold(self, holds: int) -> float:
        """Seconds of the hold that follows ``holds`` holds in a row."""
        return min(MOST_HOLD, self.first * 2.0 ** min(holds, 32))


class StartsStore(Protocol):
    """Where the record of the launches is kept between looks and runs."""

    def read(self) -> Starts: ...

    def write(self, starts: Starts) -> None: ...


class StartGuard:
    """Counts the failed starts at each look and says how many launches may go."""

    def __init__(self, backoff: Backoff, store: StartsStore) -> None:
        self.backoff = backoff
        self.store = store
        self.starts = Starts()

    def look(self, gone: list[Member], live: list[Member], now: float) -> str:
        """Count the failed starts among ``gone`` (stopped by now) and read the ``live`` members;
        what changed: "held" (no launch from now until ``starts.held_until``), "recovered" (a
        worker reported: launches go as wanted again), else ""."""
        before = self.store.read()
        self.starts, event = self._next(before, gone, live, now)
        if self.starts != before:
            self.store.write(self.starts)
        return event

    def _next(
        self, starts: Starts, gone: list[Member], live: list[Member], now: float
    ) -> tuple[Starts, str]:
        if starts.failed and any(m.reported and m.started >= starts.since for m in gone + live):
            return Starts(), "recovered" if starts.holds else ""
        failed = [member for member in gone if not member.reported]
        if not failed:
            return starts, ""
        since = starts.since or min(member.started for member in failed)
        starts = replace(starts, failed=starts.failed + len(failed), since=since)
        if not self.backoff.failures or starts.failed < self.backoff.failures:
            return starts, ""
        held_until = now + self.backoff.hold(starts.holds)
        return replace(starts, holds=starts.holds + 1, held_until=held_until), "held"

    def allowed(self, more: int, live: list[Member], now: float) -> int:
        """Of ``more`` workers wanted beyond the ``live`` ones, how many may be launched now:
        none while held, then one not reported yet at a time, until a worker reports."""
        if self.starts.held(now):
            return 0
        if self.starts.holds:
            unproven = sum(1 for member in live if not member.reported)
            return max(0, min(more, 1 - unproven))
        return more
