"""The Redis keys of a spider's fleet view: shared stats, per-minute buckets, worker heartbeats.

Every key carries the spider's ``{spider}`` hash tag (with the default ``STATS_REDIS_KEY``), so
the publishing script runs on Redis Cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

# How long a per-minute bucket is kept: an hour of history, and a margin.
MINUTE_BUCKET_TTL = 3900


@dataclass(frozen=True)
class FleetKeys:
    """Keys of one spider's fleet stats; ``stats`` is ``STATS_REDIS_KEY`` filled in."""

    spider: str
    stats: str

    @classmethod
    def for_spider(cls, spider: str, stats_key_template: str) -> FleetKeys:
        return cls(spider, stats_key_template % {"spider": spider})

    def minute(self, epoch_minute: int) -> str:
        """Hash of the requests, pages and items the fleet counted during one minute."""
        return f"{self.stats}:minute:{epoch_minute}"

    @property
    def workers(self) -> str:
        """Sorted set of worker ids, scored by heartbeat deadline (an index, pruned lazily)."""
        return "{" + self.spider + "}:workers"

    def worker(self, worker_id: str) -> str:
        """Hash of one worker's heartbeat; it expires when the worker stops beating."""
        return f"{self.workers}:{worker_id}"
