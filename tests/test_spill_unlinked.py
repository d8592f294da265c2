"""A spill file removed from under a running worker (a tmp cleaner, an operator; its directory
too, or a file put in the directory's place): the records it held and the batch written are
kept in a new file at its path before any of them counts as spilled, or, when no file can be
made there, the batch is not spilled (its requests are dead letters, never acknowledged).

Before, the worker went on appending to the removed file and acknowledged the pages: a kill -9
lost every item spilled.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from crawler.storage.spill import Record, SpillFile, read_line
from tests.harness import MONGO_PAUSE, Crawl, Restartable, Sandbox, Worker, poll, scrapy
from tests.test_mongo_outage import LEASES, SETTINGS, USERS, _settle, _spilled, _start, _stored

SPIDER = "links"


def _record(n: int) -> Record:
    return {"collection": "pages", "filter": {"url": f"https://x/{n}"}, "update": {"$set": {}}}


def _held(directory: Path) -> list[int]:
    """The record numbers the spill files of ``directory`` hold, in order (whole lines)."""
    numbers = []
    for path in sorted(directory.glob(f"{SPIDER}-*.jsonl")):
        for line in path.read_bytes().split(b"\n")[:-1]:
            if line and not line.startswith(b"#"):
                numbers.append(int(read_line(line)["filter"]["url"].rsplit("/", 1)[1]))
    return numbers


def test_a_removed_spill_file_is_made_again_with_what_it_held(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spill = tmp_path / "spill"
    own = SpillFile(spill, SPIDER)
    own.append([_record(0), _record(1)])
    own.path.unlink()
    with caplog.at_level(logging.WARNING, "crawler.storage.spill"):
        own.append([_record(2)])
    assert _held(spill) == [0, 1, 2]
    assert "was removed while this worker wrote to it" in caplog.text

    shutil.rmtree(spill)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "crawler.storage.spill"):
        own.append([_record(3)])
    assert _held(spill) == [0, 1, 2, 3]
    assert "its directory too, made again" in caplog.text
    assert own.waiting == 4
    own.close()
    assert _held(spill) == [0, 1, 2, 3]  # left for a replay: never replayed


def test_a_batch_is_not_spilled_while_no_spill_file_can_be_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spill = tmp_path / "spill"
    own = SpillFile(spill, SPIDER)
    own.append([_record(0)])
    shutil.rmtree(spill)
    spill.write_text("a file where the directory was")
    with caplog.at_level(logging.ERROR, "crawler.storage.spill"), pytest.raises(FileExistsError):
        own.append([_record(1)])
    assert "no new one can be made" in caplog.text
    assert own.waiting == 1
    with caplog.at_level(logging.ERROR, "crawler.storage.spill"):
        for _ in range(3):  # the writer's checks, once a second while MongoDB is away
            own.keep_named()
    assert caplog.text.count("no new one can be made") == 1  # said once, not every second

    spill.unlink()  # the operator takes the file away: the next batch makes the file again
    own.append([_record(2)])
    assert _held(spill) == [0, 2]  # the batch not spilled is not in it
    own.close()


@pytest.mark.integration
def test_a_worker_whose_spill_directory_is_removed_in_an_outage_loses_nothing_to_a_kill(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    """The tester's reproduction: MongoDB killed mid-crawl, items spilled, the spill directory
    removed, more pages crawled and acknowledged, the worker killed (-9); MongoDB back, a new
    worker: every profile is stored exactly once."""
    spill = tmp_path / "spill"
    with _outage(crawl, sandbox, tmp_path, own_mongo) as (worker, client):
        shutil.rmtree(spill)
        client.lpush("profiles:start_urls", *_entries(USERS[80:]))
        _all_settled(client)
        worker.kill()
    own_mongo.start()
    _settle(crawl, client, spill)
    assert "was removed while this worker wrote to it" in worker.log_text()


def test_a_spill_file_removed_between_appends_is_made_again_at_the_next_check(
    tmp_path: Path,
) -> None:
    spill = tmp_path / "spill"
    own = SpillFile(spill, SPIDER)
    own.keep_named()
    own.append([_record(0)])
    shutil.rmtree(spill)
    own.keep_named()
    assert _held(spill) == [0]
    spill_file = own.path
    own.close()
    assert _held(spill) == [0]
    assert spill_file.exists()


@pytest.mark.integration
def test_a_spill_directory_removed_while_the_worker_waits_is_made_again_before_a_kill(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    """Every page settled, nothing more to append: the spill directory removed is made again
    with what it held within seconds, so a kill (-9) then loses nothing."""
    spill = tmp_path / "spill"
    with _outage(crawl, sandbox, tmp_path, own_mongo) as (worker, client):
        _all_settled(client)
        spilled = _spilled(spill, worker)
        shutil.rmtree(spill)
        poll(lambda: _spilled(spill, worker) >= spilled, 30, "the file made again", MONGO_PAUSE)
        worker.kill()
    own_mongo.start()
    client.lpush("profiles:start_urls", *_entries(USERS[80:]))  # the rest, for the next worker
    _settle(crawl, client, spill)
    assert "its directory too, made again" in worker.log_text()


@pytest.mark.integration
def test_a_file_put_in_place_of_the_spill_directory_leaves_the_batch_unacknowledged(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    """The directory replaced by a file: the batches after it are not spilled, their requests
    dead letters with an ERROR (never acknowledged); the file taken away, the next batch makes
    the directory again with all that was spilled before. Killed (-9), MongoDB back, the dead
    letters requeued: every profile is stored exactly once."""
    spill = tmp_path / "spill"
    with _outage(crawl, sandbox, tmp_path, own_mongo) as (worker, client):
        shutil.rmtree(spill)
        spill.write_text("a file where the directory was")
        client.lpush("profiles:start_urls", *_entries(USERS[80:100]))
        poll(lambda: "no new one can be made" in worker.log_text(), 60, "the ERROR")
        spill.unlink()
        client.lpush("profiles:start_urls", *_entries(USERS[100:]))
        poll(lambda: "its directory too, made again" in worker.log_text(), 60, "a new file")
        _all_settled(client)
        worker.kill()
    own_mongo.start()
    requeued = scrapy("frontier", "profiles", "requeue", env=crawl.env())
    assert "requeued" in requeued.stdout, requeued.stderr
    _settle(crawl, client, spill)


@contextmanager
def _outage(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> Iterator[tuple[Worker, redis.Redis]]:
    """A worker crawling USERS[:80] (its pages 300 ms each, so that some are left once its
    first batch finds MongoDB away); MongoDB killed once 10 profiles are stored; the block runs
    once the worker spilled some, given the worker and a Redis client."""
    client = _start(crawl, own_mongo)
    client.delete("profiles:start_urls")
    client.lpush("profiles:start_urls", *_entries(USERS[:80]))
    sandbox.admin("config", {"latency_ms": 300})
    spill = tmp_path / "spill"
    settings = {**SETTINGS, "MONGO_SPILL_DIR": spill}
    with crawl.background("profiles", settings=settings, log=tmp_path / "w.log") as worker:
        poll(lambda: _stored(crawl.mongo) >= 10, 60, "10 profiles stored", MONGO_PAUSE)
        own_mongo.kill()
        poll(lambda: "MongoDB unavailable" in worker.log_text(), 60, "a spill")
        poll(lambda: _spilled(spill, worker), 30, "items spilled")
        yield worker, client


def _entries(users: list[str]) -> list[str]:
    return [json.dumps({"unique_id": user}) for user in users]


def _all_settled(client: redis.Redis) -> None:
    """Every request of the worker taken and settled: none queued, none leased."""

    def settled() -> bool:
        queued = client.llen("profiles:start_urls") + sum(
            client.llen(key) for key in client.keys("{profiles}:queue:*")
        )
        return not queued and not any(client.exists(key) for key in LEASES)

    poll(settled, 120, "every request settled", MONGO_PAUSE)
