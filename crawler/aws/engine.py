"""Workers as EC2 instances for ``scrapy fleet autoscale SPIDER`` (crawler/fleet/autoscaler.py):
instances pending or running are the fleet; one is idle when no live heartbeat of its host
reports pages in the last minute (a host is named after the instance's private address,
``ip-10-0-1-5``, or its id, and compared up to its first dot: Amazon Linux 2023 reports
``ip-10-0-1-5.ec2.internal``, resource-based naming ``i-0abc.us-west-2.compute.internal``);
terminating one shuts it down, which sends its worker SIGTERM."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from crawler.fleet.autoscaler import Member

if TYPE_CHECKING:
    from crawler.aws.instances import Fleet, Instance

WORKING_STATES = ("pending", "running")


def host_names(instance: Instance) -> tuple[str, ...]:
    """The host names a worker on ``instance`` may report in its heartbeat."""
    names = [instance.id]
    if instance.private_ip:
        names.append("ip-" + instance.private_ip.replace(".", "-"))
    return tuple(names)


class Ec2Workers:
    """The instances of one spider; ``rates()`` gives pages per minute by heartbeat host."""

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
    ) -> None:
        self.fleet = fleet
        self.spider = spider
        self.launch = dict(launch)  # Fleet.launch's keyword arguments: user_data, spot, ...
        self.rates = rates

    def members(self) -> list[Member]:
        rates = by_short_name(self.rates())
        return [
            Member(instance.id, _launched(instance), True, _idle(instance, rates))
            for instance in self.fleet.instances(self.spider)
            if instance.state in WORKING_STATES
        ]

    def start(self, count: int) -> list[str]:
        return [instance.id for instance in self.fleet.launch(self.spider, count, **self.launch)]

    def stop(self, ids: list[str]) -> None:
        self.fleet.terminate(ids)


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
