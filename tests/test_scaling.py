"""docs/scaling.md's budget rests on measured bytes per request: this measures them again.

A million profile requests go through the frontier's own SCHEDULE script (``Frontier.schedule``,
duplicate filter off so the queue alone is measured) into the test Redis, and the growth of
Redis's ``used_memory`` per request must match the figure the document states, within the
tolerance it states (read from the document, so document and measurement cannot drift apart).
Delayed requests (the ``data`` hash and the ``delayed`` sorted set) are checked the same way.

Run alone with ``pytest -m scaling`` (about 10-20 s on a 2-core machine).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request, Spider

from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier, Pending
from crawler.frontier.records import pending
from crawler.keys import FrontierKeys

pytestmark = pytest.mark.scaling

DOC = Path(__file__).resolve().parents[1] / "docs" / "scaling.md"
SPIDER = "scaling-simulation"
KEYS = FrontierKeys(SPIDER, f"{SPIDER}:start_urls")
QUEUED = 1_000_000
DELAYED = 100_000
BATCH = 1_000  # requests per SCHEDULE call, as large as the scheduler's largest
CALLS_PER_PIPELINE = 20
TOLERANCE = 0.10  # the document states it too; both are checked to agree
FINGERPRINT = bytes(range(20))  # unused with the filter off
URL = "https://www.tiktok.com/@user.{:08d}"
# The record ``records.pending`` makes of a profile request (checked below), built by string
# formatting: a million Scrapy requests would take longer to make than to schedule.
RECORD = '{{"u":"' + URL + '","c":"parse_profile","a":{{"unique_id":"user.{:08d}"}}}}'


class Profiles(Spider):
    name = "profiles"

    def parse_profile(self, response: Any, unique_id: str) -> None: ...


def record(number: int) -> str:
    return RECORD.format(number, number)


def documented(figure: str) -> tuple[float, float]:
    """The value in bytes and the tolerance (a fraction) of a row of the document's table of
    checked figures: ``| <figure> ... | <value> B | ±<tolerance>% |``."""
    pattern = rf"^\| {re.escape(figure)}[^|]*\| (\d+(?:\.\d+)?) B \| ±(\d+)% \|"
    found = re.search(pattern, DOC.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, f"docs/scaling.md has no row {figure!r} in its table of checked figures"
    return float(found[1]), int(found[2]) / 100


class WirePipeline:
    """The ``client`` argument of ``Frontier.schedule``: queues its EVAL commands and sends them
    in one write on a connection of the real client, packed here (redis-py packs each argument
    through several calls, which at seven arguments per request would take most of the test's
    time; the bytes on the wire are the same RESP). A round's replies are read once the next
    round is sent, so that Redis runs one round's scripts while this process packs the next."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.commands: list[tuple[Any, ...]] = []
        self.unread = 0

    def execute_command(self, *args: Any) -> None:
        self.commands.append(args)

    def send(self) -> int:
        """Send the queued commands; how many requests the commands sent before them took."""
        self.connection.send_packed_command([b"".join(map(_pack, self.commands))])
        taken = self.read()
        self.unread = len(self.commands)
        self.commands.clear()
        return taken

    def read(self) -> int:
        """How many requests the commands sent and not yet read took."""
        replies = [self.connection.read_response() for _ in range(self.unread)]
        self.unread = 0
        return sum(sum(flags) for flags in replies)


def _pack(args: Sequence[Any]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def schedule_all(client: redis.Redis, frontier: Frontier, entries: Iterator[Pending]) -> int:
    """Schedule ``entries`` in batches of BATCH, CALLS_PER_PIPELINE batches a round trip;
    returns how many the frontier took."""
    connection: Any = client.connection_pool.get_connection()
    try:
        taken, pipe = 0, WirePipeline(connection)
        while batch := [entry for _, entry in zip(range(BATCH), entries, strict=False)]:
            frontier.schedule(batch, client=pipe)
            if len(pipe.commands) == CALLS_PER_PIPELINE:
                taken += pipe.send()
        return taken + pipe.send() + pipe.read()
    finally:
        client.connection_pool.release(connection)


def data_bytes(client: redis.Redis) -> int:
    """Redis's ``used_memory`` without client buffers, once lazily freed keys are gone."""
    deadline = time.monotonic() + 30
    info: dict[str, Any] = client.info("memory")
    while int(info.get("lazyfree_pending_objects", 0)) and time.monotonic() < deadline:
        time.sleep(0.05)  # not the reactor: a plain test polling a server with a deadline
        info = client.info("memory")
    buffers = int(info["mem_clients_normal"]) + int(info.get("mem_aof_buffer", 0))
    return int(info["used_memory"]) - buffers


def measured_growth(client: redis.Redis, entries: Iterator[Pending], count: int) -> float:
    """Bytes per entry Redis grows by while ``entries`` are scheduled with the filter off."""
    frontier = Frontier(client, KEYS, DupefilterConfig("none"))
    frontier.schedule([])  # the script is in Redis's cache before the first measure
    before = data_bytes(client)
    assert schedule_all(client, frontier, entries) == count
    return (data_bytes(client) - before) / count


@pytest.fixture
def server(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    yield redis_client
    for key in redis_client.scan_iter(match="{" + SPIDER + "}:*", count=1000):
        redis_client.unlink(key)


def test_the_simulated_record_is_the_one_the_scheduler_makes() -> None:
    spider = Profiles()
    for number in (0, 7, 99_999_999):
        request = Request(
            URL.format(number),
            callback=spider.parse_profile,
            cb_kwargs={"unique_id": f"user.{number:08d}"},
        )
        assert pending(request, FINGERPRINT, spider).json == record(number)


def test_the_documented_tolerance_is_the_tested_one() -> None:
    for figure in ("bytes per queued request", "bytes per delayed request"):
        assert documented(figure)[1] == TOLERANCE


def test_a_million_queued_requests_take_the_documented_bytes(server: redis.Redis) -> None:
    entries = (Pending(record(number), FINGERPRINT) for number in range(QUEUED))
    per_request = measured_growth(server, entries, QUEUED)
    assert server.llen(KEYS.queue_prefix + "0") == QUEUED
    expected, tolerance = documented("bytes per queued request")
    assert abs(per_request - expected) <= tolerance * expected, (
        f"{per_request:.1f} B per queued request measured, docs/scaling.md says {expected:g} B"
    )


def test_delayed_requests_take_the_documented_bytes(server: redis.Redis) -> None:
    due = time.time() + 86_400
    entries = (Pending(record(number), FINGERPRINT, due=due + number) for number in range(DELAYED))
    per_request = measured_growth(server, entries, DELAYED)
    assert server.zcard(KEYS.delayed) == DELAYED
    expected, tolerance = documented("bytes per delayed request")
    assert abs(per_request - expected) <= tolerance * expected, (
        f"{per_request:.1f} B per delayed request measured, docs/scaling.md says {expected:g} B"
    )
