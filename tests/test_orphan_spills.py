"""Items a worker spilled in a MongoDB outage, the worker then killed (-9): the fleet sees them.

The spill file holds them on the worker's machine alone, replayed only by a worker of the
spider started there with the same MONGO_SPILL_DIR. ``scrapy status`` (text and JSON) and its
``/metrics`` show how many wait on which host, and the fleet's sizing wants a worker while they
do (so an autoscaler or KEDA brings one back, scale-to-zero does not end them); a worker
started with that spill directory replays them and the record is gone.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from crawler.storage.health import StorageHealth
from crawler.storage.waiting import SpillRecord, read_waiting
from tests.harness import MONGO_PAUSE, Crawl, Restartable, Sandbox, poll, scrapy, status_page
from tests.test_mongo_outage import USERS, _settings, _spilled, _start, _stored

pytestmark = pytest.mark.integration

SPILLED_KEY = "{profiles}:spilled"


def test_items_spilled_by_a_killed_worker_are_shown_and_want_a_worker_until_replayed(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    client = _start(crawl, own_mongo)
    sandbox.admin("config", {"latency_ms": 50})
    spill = tmp_path / "spill"
    settings = {**_settings(spill), "WORKER_HEARTBEAT_TTL": 3}
    with crawl.background("profiles", settings=settings, log=tmp_path / "w.log") as worker:
        poll(lambda: _stored(crawl.mongo) >= 10, 60, "10 profiles stored", MONGO_PAUSE)
        own_mongo.kill()
        # The rest is fetched and spilled, every lease settled, the fleet told of the spill.
        spilled = poll(lambda: _all_spilled(crawl, spill, worker), 90, "every item spilled")
        worker.kill()
    host = socket.gethostname()

    # Once its heartbeat has expired, no live worker holds the file.
    status = poll(lambda: _status_if(crawl, lambda s: not s["workers"]), 30, "worker gone")
    [entry] = status["spilled"]
    assert (entry["host"], entry["items"], entry["held"]) == (host, spilled, False)
    assert Path(entry["path"]).parent == spill.absolute()
    assert status["sizing"]["workers_wanted"] >= 1
    assert status["frontier"]["queue"] == status["frontier"]["leased"] == 0
    text = scrapy("status", "profiles", env=crawl.env()).stdout
    assert f"{spilled} items spilled on {host} (MONGO_SPILL_DIR) wait for a worker there" in text
    metrics, page = _served(crawl)
    assert f"{spilled} items spilled on {host} (MONGO_SPILL_DIR) wait for a worker there" in page
    assert metrics[("crawler_spilled_items_waiting", host)] == spilled
    assert metrics[("crawler_workers_wanted", "")] >= 1

    own_mongo.start()
    result = crawl("profiles", settings={"MONGO_SPILL_DIR": spill}, timeout=180)
    assert result.returncode == 0, result.stdout[-4000:]
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(USERS)
    assert not client.exists(SPILLED_KEY)
    status = _status(crawl)
    assert status["spilled"] == []
    assert status["sizing"]["workers_wanted"] == 0
    assert "wait for a worker there" not in scrapy("status", "profiles", env=crawl.env()).stdout


def _all_spilled(crawl: Crawl, spill: Path, worker: Any) -> int | None:
    """The items in the worker's spill file once nothing is left to fetch (queued, leased,
    start entries) and the fleet's record says as many; else None."""
    spilled = len(_spilled(spill, worker))
    status = _status(crawl)
    frontier = status["frontier"]
    if not spilled or any(frontier[n] for n in ("queue", "leased", "start", "start_leased")):
        return None
    recorded = sum(entry["items"] for entry in status["spilled"])
    return spilled if recorded == spilled else None


def _status_if(crawl: Crawl, wanted: Any) -> dict[str, Any] | None:
    status = _status(crawl)
    return status if wanted(status) else None


def _status(crawl: Crawl) -> dict[str, Any]:
    shown = scrapy("status", "profiles", "--json", env=crawl.env())
    assert shown.returncode == 0, shown.stderr[-4000:]
    status: dict[str, Any] = json.loads(shown.stdout)["spiders"]["profiles"]
    return status


def _served(crawl: Crawl) -> tuple[dict[tuple[str, str], float], str]:
    """``scrapy status --serve``'s gauges of profiles ((name, host label) -> value) and its
    fleet page."""
    with status_page(crawl.env()) as url:
        with urlopen(url + "metrics", timeout=30) as answer:
            metrics = answer.read().decode()
        with urlopen(url, timeout=30) as answer:
            page = answer.read().decode()
    gauges = {
        (sample.name, sample.labels.get("host", "")): sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.labels.get("spider") == "profiles"
    }
    return gauges, page


def test_a_replayed_file_clears_its_record_whatever_host_wrote_it(
    redis_client: redis.Redis,
) -> None:
    """A container started again under a new name (its volume the same) replays the file the
    old one left: the old one's entry goes; the entry of another file stays. A worker's own
    entry follows its count, and goes once its file is replayed whole."""
    old = SpillRecord("profiles", "pod-a")
    old.write(redis_client, StorageHealth(True, 30, "/spill/profiles-11-0123abcd.jsonl"))
    other = SpillRecord("profiles", "vm9")
    other.write(redis_client, StorageHealth(True, 4, "/spill/profiles-12-4567abcd.jsonl"))
    new = SpillRecord("profiles", "pod-b")
    own = "/spill/profiles-13-89abcdef.jsonl"
    new.write(redis_client, StorageHealth(False, 7, own, ("profiles-11-0123abcd.jsonl",)))
    waiting = {(s.host, s.items) for s in read_waiting(redis_client, "profiles")}
    assert waiting == {("vm9", 4), ("pod-b", 7)}
    new.write(redis_client, StorageHealth(False, 0, own, ("profiles-11-0123abcd.jsonl",)))
    assert [(s.host, s.items) for s in read_waiting(redis_client, "profiles")] == [("vm9", 4)]
