"""The frontier scheduler's settings, read and checked once, and the limits they imply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.config import setting, setting_int
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.pacing import Pacing, fleet_pacing

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

# New requests are written to Redis every FRONTIER_FLUSH_INTERVAL, before each pop, or once this
# many FRONTIER_BATCH_SIZEs of them wait (the page whose links they are is acknowledged after).
PUSH_BATCHES = 8
# Seconds acknowledgements (and other lease updates) may wait for a round trip that goes anyway
# (a pop, new requests), at most a sixth of FRONTIER_LEASE_SECONDS.
HOLD_ACKS = 10.0


def hold_acks(lease_seconds: float) -> float:
    """Seconds an acknowledgement (or what it waits for) may wait for a round trip."""
    return min(HOLD_ACKS, lease_seconds / 6)


@dataclass(frozen=True)
class FrontierSettings:
    """The scheduler's settings, read and checked once."""

    batch_size: int
    lease_seconds: int
    flush_interval: float
    dupefilter: DupefilterConfig
    local_seen: int
    idle_poll: float = 1.0
    read_ahead: int = 0  # START_READ_AHEAD
    pacing: Pacing | None = None  # the fleet's politeness, taken in the pop and the send gate

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierSettings:
        lease_seconds = setting_int(settings, "FRONTIER_LEASE_SECONDS", 5)
        return cls(
            batch_size=setting_int(settings, "FRONTIER_BATCH_SIZE", 1, 1000),
            lease_seconds=lease_seconds,
            flush_interval=setting(settings, "FRONTIER_FLUSH_INTERVAL"),
            dupefilter=DupefilterConfig.from_settings(settings),
            local_seen=setting_int(settings, "DUPEFILTER_LOCAL_CACHE", 0),
            idle_poll=setting(settings, "IDLE_POLL_INTERVAL"),
            read_ahead=setting_int(settings, "START_READ_AHEAD", 0),
            pacing=fleet_pacing(settings, lease_seconds),
        )
