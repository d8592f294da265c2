"""Spilled items that wait on a machine for a worker there (crawler/storage/waiting.py), as
``scrapy status`` and its ``/metrics`` show them.

A spill file is held by its worker while that worker lives (its heartbeat's host and pid are
those of the file's name): it replays the file once MongoDB answers. A file no live worker
holds waits for the next worker of its spider started on that machine with the same
MONGO_SPILL_DIR: nothing else replays it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily

from crawler.storage.waiting import WaitingSpill, read_waiting

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from crawler.connection import RedisClient

# The pid in a spill file's name, ``<spider>-<pid>-<random>.jsonl`` (spill.py).
_PID = re.compile(r"-(\d+)(?:-[0-9a-f]{8})?\.jsonl$")


def spills_status(
    server: RedisClient, spider: str, workers: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The spill files of ``spider`` holding items, each with ``held``: whether a live worker
    (of ``workers``, their heartbeats) holds it."""
    live = {(str(beat.get("host")), str(beat.get("pid"))) for beat in workers}
    return [
        {**s.to_json(), "held": (s.host, _pid(s)) in live} for s in read_waiting(server, spider)
    ]


def waiting_by_host(spills: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The items of the spill files no live worker holds, by host."""
    hosts: dict[str, int] = {}
    for spill in spills:
        if not spill["held"]:
            hosts[spill["host"]] = hosts.get(spill["host"], 0) + spill["items"]
    return hosts


def spills_texts(spills: Iterable[Mapping[str, Any]]) -> list[str]:
    """What the items no live worker holds wait for, by host (``scrapy status``, the fleet
    page)."""
    return [
        f"{items:,} items spilled on {host} (MONGO_SPILL_DIR) wait for a worker there"
        for host, items in sorted(waiting_by_host(spills).items())
    ]


def spills_lines(spills: Iterable[Mapping[str, Any]]) -> list[str]:
    """``scrapy status``'s lines: the items no live worker holds, by host."""
    return [f"  spilled   {text}" for text in spills_texts(spills)]


def spills_metric(by_spider: Mapping[str, Iterable[Mapping[str, Any]]]) -> Metric:
    """``crawler_spilled_items_waiting{spider,host}``: items in spill files no live worker
    holds, by the host they wait on."""
    gauge = GaugeMetricFamily(
        "crawler_spilled_items_waiting",
        "Items spilled in a MongoDB outage by workers that are gone, waiting on their host's "
        "disk for a worker of the spider to start there (MONGO_SPILL_DIR).",
        labels=("spider", "host"),
    )
    for spider, spills in by_spider.items():
        for host, items in sorted(waiting_by_host(spills).items()):
            gauge.add_metric([spider, host], items)
    return gauge


def _pid(spill: WaitingSpill) -> str:
    match = _PID.search(spill.path)
    return match.group(1) if match else ""
