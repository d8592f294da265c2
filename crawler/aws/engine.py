"""Workers as EC2 instances for ``scrapy fleet autoscale SPIDER`` (crawler/fleet/autoscaler.py):
instances pending or running are the fleet; one is idle when no live heartbeat of its host
reports pages in the last minute (a host is named after the instance's private address,
``ip-10-0-1-5``, or its id, and compared up to its first dot: Amazon Linux 2023 reports
``ip-10-0-1-5.ec2.internal``, resource-based naming ``i-0abc.us-west-2.compute.internal``);
terminating one shuts it down, which sends its worker SIGTERM.

An instance whose worker quit is ``gone``, terminated at once and not counted (so it is replaced
when workers are wanted): one that reported a ban (``{spider}:fleet:banned``, exit status 3), or
one with no live heartbeat for FLEET_WORKER_GRACE seconds since its launch or the last heartbeat
an autoscale look saw (``{spider}:fleet:seen``): a failed install, secrets it could not read, a
setting it refused (exit status 2). One whose worker was never seen beating (not ``reported``)
is a failed start: FLEET_START_FAILURES of them in a row hold launches back
(crawler/fleet/backoff.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from crawler.aws.report import banned_instances, clear_banned
from crawler.connection import reply_text
from crawler.fleet.autoscaler import Member
from crawler.keys import seen_key

if TYPE_CHECKING:
    from crawler.aws.instances import Fleet, Instance
    from crawler.connection import RedisClient

WORKING_STATES = ("pending", "running")
SEEN_TTL = 86_400  # {spider}:fleet:seen outlives an autoscaler stopped for a day, not more


def host_names(instance: Instance) -> tuple[str, ...]:
    """The host names a worker on ``instance`` may report in its heartbeat."""
    names = [instance.id]
    if instance.private_ip:
        names.append("ip-" + instance.private_ip.replace(".", "-"))
    return tuple(names)


class Ec2Workers:
    """The instances of one spider; ``rates()`` gives pages per minute by heartbeat host (every
    live heartbeat's host, at 0 when it fetched nothing); ``server`` holds the ban reports and
    when each instance's worker was last seen beating."""

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        # Imported here, as boto3 is (instances.py): every scrapy command loads this module.
        from botocore.exceptions import BotoCoreError, ClientError

        return (BotoCoreError, ClientError)

    def __init__(
        self,
        fleet: Fleet,
        spider: str,
        launch: Mapping[str, Any],
        rates: Callable[[], Mapping[str, float]],
        server: RedisClient,
        grace: float,
    ) -> None:
        self.fleet = fleet
        self.spider = spider
        self.launch = dict(launch)  # Fleet.launch's keyword arguments: user_data, spot, ...
        self.rates = rates
        self.server = server
        self.grace = grace  # seconds an instance may go without a heartbeat of its worker

    def members(self) -> list[Member]:
        rates = by_short_name(self.rates())
        banned = banned_instances(self.server, self.spider)
        instances = [i for i in self.fleet.instances(self.spider) if i.state in WORKING_STATES]
        raw: Any = self.server.hgetall(seen_key(self.spider))
        seen = {reply_text(key): float(value) for key, value in raw.items()}
        now = time.time()
        beating = {i.id for i in instances if any(name in rates for name in host_names(i))}
        found = []
        for instance in instances:
            launched = _launched(instance)
            last = now if instance.id in beating else max(launched, seen.get(instance.id, 0.0))
            gone = instance.id in banned or now - last > self.grace
            reported = instance.id in beating or instance.id in seen or instance.id in banned
            idle = _idle(instance, rates)
            found.append(Member(instance.id, launched, True, idle, gone, reported))
        self._remember(now, beating, set(seen) - {instance.id for instance in instances})
        return found

    def _remember(self, now: float, beating: set[str], left: set[str]) -> None:
        """Keep when these instances were seen beating; forget those no longer running."""
        pipe = self.server.pipeline(transaction=False)
        if beating:
            pipe.hset(seen_key(self.spider), mapping=dict.fromkeys(beating, repr(now)))
            pipe.expire(seen_key(self.spider), SEEN_TTL)
        if left:
            pipe.hdel(seen_key(self.spider), *left)
        pipe.execute()

    def start(self, count: int) -> list[str]:
        return [instance.id for instance in self.fleet.launch(self.spider, count, **self.launch)]

    def stop(self, ids: list[str]) -> None:
        self.fleet.terminate(ids)
        clear_banned(self.server, self.spider, ids)


def short_name(host: str) -> str:
    """A host name up to its first dot: ``ip-10-0-1-5.ec2.internal`` is ``ip-10-0-1-5``."""
    return host.split(".", 1)[0].lower()


def by_short_name(rates: Mapping[str, float]) -> dict[str, float]:
    """Pages per minute by heartbeat host, the hosts' names up to their first dot."""
    short: dict[str, float] = {}
    for host, rate in rates.items():
        short[short_name(host)] = short.get(short_name(host), 0.0) + rate
    return short


def _idle(instance: Instance, rates: Mapping[str, float]) -> bool:
    return not any(rates.get(name, 0.0) > 0 for name in host_names(instance))


def _launched(instance: Instance) -> float:
    try:
        return datetime.fromisoformat(instance.launched).timestamp()
    except ValueError:
        return 0.0
