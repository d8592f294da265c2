"""How many workers the work allows: the ready requests, the politeness ceiling, the fleet's
measured pace and, from them, the workers wanted (docs/scaling.md, "An elastic fleet").

- **pace**: pages per worker-second, measured over the last minutes from the fleet's minute
  buckets: pages over the seconds workers were busy (a worker is busy while it has a request
  in the downloader: see ``progress.BusyClock``), so a worker that waits for its hosts' turns
  does not look slow; AUTOSCALE_WORKER_PACE until any was measured;
- **leased**: requests the workers held (leases) when the queue's head was looked at, and the
  start entries they hold now: being done, and back in the queue if their worker stops. They
  count as ready work of a host without a rate (their turns were taken), so a fleet at the
  tail of its work does not stop workers for the queue looking empty, and start them again
  for the work those workers gave back;
- **workers wanted**: the lesser of the ready and leased requests over what a worker fetches in
  AUTOSCALE_BACKLOG_SECONDS, and the politeness ceiling (the leased work added, over as many
  seconds, or over the look-ahead of a paced pop when longer) over the pace
  (both rounded up); at least one while any work is left (queued, leased, delayed or start
  entries), any revisit is due (``{spider}:revisit``, crawler/recrawl/store.py) or any spill
  file holds items (``{spider}:spilled``, crawler/storage/waiting.py); within
  AUTOSCALE_MIN_WORKERS and AUTOSCALE_MAX_WORKERS;
- **spills waiting**: items a worker spilled in a MongoDB outage wait in its spill file until a
  worker of the spider runs on that machine (its MONGO_SPILL_DIR): while any do, one worker is
  wanted (where it runs is the deployment's to say: a persistent volume, docs/storage.md);
- **revisits due**: only a running worker hands due revisits to the frontier, so while any is
  due (RECRAWL_ENABLED) one worker is wanted: it moves them into the queue, RECRAWL_BATCH_SIZE
  every RECRAWL_POLL_INTERVAL, and there they are sized as any queued work is, by their hosts'
  rates (where they wait, nothing tells their hosts). They are not work that keeps a running
  crawl open (``crawler.frontier.idle``): only what brings a fleet back;
- **paused**: while the crawl is paused (``{spider}:paused``) no work may go: the workers
  wanted are AUTOSCALE_MIN_WORKERS, so an autoscaler lets the idle ones go (they give back
  what they hold) and starts them again once the crawl is resumed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.frontier.pacing import fleet_pacing
from crawler.frontier.queue import spider_frontier, work_left
from crawler.observability.demand import queue_demand, read_demand
from crawler.recrawl.store import queue_due_count
from crawler.spiders.entry_hosts import spider_entry_hosts
from crawler.storage.waiting import spilled_key

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient
    from crawler.frontier.pacing import Pacing
    from crawler.keys import FrontierKeys
    from crawler.observability.demand import Demand

# The minute bucket field of the worker-milliseconds busy (the stat a worker counts them in).
BUSY_FIELD = "busy_ms"
BUSY_STAT = "fleet/busy_ms"
# Busy worker-seconds below which no pace is measured (a fleet just starting).
MIN_BUSY_SECONDS = 2.0


@dataclass(frozen=True)
class SizingConfig:
    """AUTOSCALE_* (docs/settings.md), read and checked once."""

    min_workers: int = 0
    max_workers: int = 8
    backlog_seconds: float = 60.0
    default_pace: float = 10.0
    sample: int = 1000
    interval: float = 15.0
    cooldown: float = 120.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SizingConfig:
        config = cls(
            min_workers=setting(settings, "AUTOSCALE_MIN_WORKERS"),
            max_workers=setting(settings, "AUTOSCALE_MAX_WORKERS"),
            backlog_seconds=setting(settings, "AUTOSCALE_BACKLOG_SECONDS"),
            default_pace=setting(settings, "AUTOSCALE_WORKER_PACE"),
            sample=setting(settings, "AUTOSCALE_SAMPLE"),
            interval=setting(settings, "AUTOSCALE_INTERVAL"),
            cooldown=setting(settings, "AUTOSCALE_COOLDOWN"),
        )
        if config.min_workers > config.max_workers:
            raise SettingsError(
                f"AUTOSCALE_MIN_WORKERS ({config.min_workers}) must not exceed "
                f"AUTOSCALE_MAX_WORKERS ({config.max_workers})"
            )
        return config


@dataclass(frozen=True)
class Sizing:
    """What the work allows now, and the workers wanted for it."""

    ready: float  # requests that may go now
    ceiling: float  # requests per second the sites allow the work
    pace: float  # pages per worker-second (measured, or the configured one)
    measured: bool  # whether ``pace`` was measured
    work: int  # work left: requests queued, leased, delayed and start entries
    wanted: int
    leased: int = 0  # requests and start entries the workers hold
    paused: bool = False  # the crawl is paused: no work may go
    revisits_due: int = 0  # revisits due in {spider}:revisit, not in the frontier yet
    spills: int = 0  # spill files holding items ({spider}:spilled), on any machine
    demand: Demand | None = field(default=None, compare=False, repr=False)  # what it came from

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": round(self.ready, 1),
            "ceiling_per_second": round(self.ceiling, 3),
            "pace_per_worker_second": round(self.pace, 3),
            "pace_measured": self.measured,
            "work_left": self.work,
            "leased": self.leased,
            "paused": self.paused,
            "revisits_due": self.revisits_due,
            "spill_files_waiting": self.spills,
            "workers_wanted": self.wanted,
        }


def measured_pace(minutes: Mapping[int, Mapping[str, int]]) -> float | None:
    """Pages per busy worker-second over the minute buckets, None when too few were busy."""
    pages = sum(bucket.get("pages", 0) for bucket in minutes.values())
    busy = sum(bucket.get(BUSY_FIELD, 0) for bucket in minutes.values()) / 1000
    return pages / busy if busy >= MIN_BUSY_SECONDS and pages > 0 else None


def size(
    demand: Demand,
    work: int,
    pace: float | None,
    config: SizingConfig,
    leased: int = 0,
    ahead: float = 0.0,
    revisits_due: int = 0,
    spills: int = 0,
) -> Sizing:
    """The workers ``demand`` and the ``leased`` work ask for with ``work`` left at ``pace``
    (None: not measured), at least one while ``revisits_due`` or ``spills`` are; the minimum
    while the crawl is paused. ``ahead``: the seconds a paced pop leases turns ahead
    (``Pacing.ahead``; 0 unpaced)."""
    per_worker = pace or config.default_pace
    ready, ceiling = demand.ready(), demand.ceiling(config.backlog_seconds)
    by_ready = _workers(ready + leased, per_worker * config.backlog_seconds)
    # Paced turns are leased up to ``ahead`` seconds before they go: no sooner than that.
    leased_rate = leased / max(config.backlog_seconds, ahead)
    by_ceiling = _workers(ceiling + leased_rate, per_worker)
    wanted = min(by_ready, by_ceiling)
    if work > 0 or revisits_due > 0 or spills > 0:
        wanted = max(1, wanted)
    wanted = config.min_workers if demand.paused else max(config.min_workers, wanted)
    wanted = min(config.max_workers, wanted)
    measured = pace is not None
    paused = demand.paused
    return Sizing(
        ready,
        ceiling,
        per_worker,
        measured,
        work,
        wanted,
        leased,
        paused,
        revisits_due,
        spills,
        demand,
    )


def _workers(work: float, per_worker: float) -> int:
    """Workers ``work`` asks for at ``per_worker`` each, rounded up (a hair's excess ignored)."""
    return math.ceil(work / per_worker - 1e-9) if work > 0 else 0


# The ``fresh`` of a command's look (status, fleet plan, the autoscaler): made now with the
# command's own settings, and not kept as the fleet's shared look, which the workers make with
# theirs (a worker's -s POLITENESS_RATE differs from a command's defaults).
COMMAND_LOOK = -1.0


@dataclass(frozen=True)
class SizingInputs:
    """What a worker's look at the queue needs besides its keys: the settings, the fleet's
    pacing, and how old a look of the fleet's may be to do (STATS_PUBLISH_INTERVAL: the fleet's
    workers share one look per period)."""

    config: SizingConfig
    pacing: Pacing | None
    fresh: float = 0.0
    revisits: bool = False  # RECRAWL_ENABLED: the spider's workers hand due revisits on
    # A start entry's host as its spider's request has it (None: a URL's, see read_demand).
    host_of: Callable[[str], str] | None = None

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str = "") -> SizingInputs:
        """The inputs of ``spider`` (its start entries' hosts read as it makes its requests)."""
        lease = float(settings.getfloat("FRONTIER_LEASE_SECONDS"))
        fresh = float(setting(settings, "STATS_PUBLISH_INTERVAL"))
        pacing, revisits = fleet_pacing(settings, lease), setting(settings, "RECRAWL_ENABLED")
        host_of = spider_entry_hosts(settings, spider) if spider else None
        config = SizingConfig.from_settings(settings)
        return cls(config, pacing, fresh, bool(revisits), host_of)

    def ahead(self) -> float:
        """The seconds a paced pop leases turns ahead; 0 unpaced."""
        return self.pacing.ahead if self.pacing is not None else 0.0

    def queue_look(self, pipe: Any, keys: FrontierKeys, fresh: float = 0.0) -> None:
        """Queue on ``pipe`` the look :meth:`size_from` reads: the queue's head and the pause
        (:func:`queue_demand`, the fleet's last look while younger than ``fresh`` seconds) and
        the revisits due now (of a spider that revisits: one that does not would never hand
        them on), and the spill files holding items."""
        queue_demand(pipe, keys, self.pacing, self.config.sample, fresh)
        if self.revisits:
            queue_due_count(pipe, keys.spider, time.time())
        pipe.hlen(spilled_key(keys.spider))

    def size_from(
        self,
        replies: list[Any],
        sizes: Mapping[str, int],
        work: int,
        pace: float | None,
    ) -> Sizing:
        """The sizing from the replies of :meth:`queue_look` and the frontier's ``sizes``."""
        demand = read_demand(replies[:3], sizes.get("start", 0), self.pacing, self.host_of)
        leased, due = leased_work(demand, sizes), int(replies[3]) if self.revisits else 0
        spills = int(replies[-1])
        return size(demand, work, pace, self.config, leased, self.ahead(), due, spills)


def read_sizing(
    server: RedisClient,
    settings: BaseSettings,
    spider: str,
    sizes: Mapping[str, int],
    minutes: Mapping[int, Mapping[str, int]],
    per_entry: float = 1.0,
) -> Sizing:
    """The fleet's sizing now, for a command: the frontier's ``sizes`` and ``minutes`` of the
    fleet's buckets read already, the queue's head, the pause and the revisits due in one more
    round trip."""
    inputs = SizingInputs.from_settings(settings, spider)
    keys = spider_frontier(server, settings, spider).keys
    pipe = server.pipeline(transaction=False)
    inputs.queue_look(pipe, keys, COMMAND_LOOK)
    work, pace = work_left(sizes, per_entry), measured_pace(minutes)
    return inputs.size_from(pipe.execute(), sizes, work, pace)


def leased_work(demand: Demand, sizes: Mapping[str, int]) -> int:
    """Requests the workers leased when ``demand`` looked at the queue (a look the fleet shares
    may be a few seconds old: requests popped since count in its queue, not twice), and the
    start entries they hold now (the start list is read afresh)."""
    return demand.leased + sizes.get("start_leased", 0)
