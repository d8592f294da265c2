"""Items a request's own errback yields (Scrapy passes them through no spider middleware) are
stored before the request's lease is acknowledged: a worker killed in between loses none. The
spider is a user's own (tests/errback_spider.py): its downloader middleware turns pages away
(IgnoreRequest) and its errback stores each as skipped."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.asyncgen import as_async_generator
from scrapy.utils.test import get_crawler
from twisted.python.failure import Failure

from crawler.frontier.leases import ACK, DEAD, LEASE_META, LeaseLedger
from devtools.services import free_port
from tests.harness import Crawl, background, poll

pytestmark = pytest.mark.integration

SPIDER = "skipping"
LEASES = "{skipping}:leases"
# The user's spider module; leases of 5 s (renewed every second) so a dead worker's come back soon.
SETTINGS = {"SPIDER_MODULES": "tests.errback_spider", "FRONTIER_LEASE_SECONDS": 5}


def _leases(client: redis.Redis) -> dict[bytes, float]:
    """The leases held, by when each expires."""
    raw: Any = client.zrange(LEASES, 0, -1, withscores=True)
    leases: dict[bytes, float] = dict(raw)
    return leases


def _settled_since(client: redis.Redis, before: dict[bytes, float]) -> bool:
    """Whether the worker wrote its leases since ``before`` was read: acked, or renewed."""
    now = _leases(client)
    return not now or any(score > before.get(lease, score) for lease, score in now.items())


def test_an_errbacks_item_held_in_the_pipelines_keeps_its_lease_through_a_kill(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A page the spider's skip list turns away: the errback's item waits in a slow pipeline of
    the user's. The page's lease was acked meanwhile, and the worker killed then (kill -9) lost
    the item for good: the next worker found nothing to do. Now the lease is kept (renewed)
    until the item is stored, so it comes back and the next worker stores it."""
    url = f"{crawl.sandbox_url}/skip/1"
    hold = tmp_path / "hold"
    hold.touch()
    redis_client.lpush(f"{SPIDER}:start_urls", url)
    log = tmp_path / "first.log"
    first = crawl.command(SPIDER, settings={**SETTINGS, "SKIP_HOLD": str(hold)})
    with background(first, crawl.env(), log) as worker:
        poll(lambda: f"Skipped {url}" in log.read_text(), 60, "the errback", 0.1)
        held = _leases(redis_client)
        poll(lambda: _settled_since(redis_client, held), 10, "the next round trip", 0.1)
        worker.kill()
    hold.unlink()
    assert crawl.mongo.db.skipped.count_documents({}) == 0  # held, not stored yet

    second = crawl(SPIDER, settings=SETTINGS)

    assert second.returncode == 0, second.stderr[-3000:]
    stored = list(crawl.mongo.db.skipped.find({}, {"_id": 0, "url": 1, "reason": 1}))
    assert stored == [{"url": url, "reason": "IgnoreRequest"}]
    assert not redis_client.exists(LEASES, "{skipping}:queues", f"{SPIDER}:start_urls")
    assert redis_client.llen("{skipping}:dead") == 0


def test_every_failure_an_errback_meets_has_its_items_stored_and_its_lease_ended_once(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """A page turned away (acked), a 404 (its errback's output goes through the spider
    middlewares: acked once, not waited for twice) and a refused connection (a dead letter,
    written once the errback's item is stored: it counts it): each errback's item is stored,
    and the crawl ends with nothing left leased."""
    urls = {
        "IgnoreRequest": f"{crawl.sandbox_url}/skip/2",
        "HttpError": f"{crawl.sandbox_url}/no/such/page",
        "DownloadConnectionRefusedError": f"http://127.0.0.1:{free_port()}/",
    }
    redis_client.lpush(f"{SPIDER}:start_urls", *urls.values())

    result = crawl(SPIDER, settings={**SETTINGS, "RETRY_TIMES": 0})

    assert result.returncode == 0, result.stderr[-3000:]
    stored = crawl.mongo.db.skipped.find({}, {"_id": 0})
    assert {doc["reason"]: doc["url"] for doc in stored} == urls
    (letter,) = [json.loads(raw) for raw in redis_client.lrange("{skipping}:dead", 0, -1)]
    assert letter["failure"]["reason"] == "download_error:DownloadConnectionRefusedError"
    assert letter["failure"]["items_stored"] == 1
    assert not redis_client.exists(LEASES, "{skipping}:queues", f"{SPIDER}:start_urls")


# --- the lease ledger alone -----------------------------------------------------------------

URL = "https://shop.test/skip/3"


def _items(failure: Failure) -> Iterator[dict[str, int]]:
    yield {"n": 1}
    yield {"n": 2}


async def _items_later(failure: Failure) -> list[dict[str, int]]:
    await asyncio.sleep(0)
    return [{"n": 1}, {"n": 2}]


async def _items_as_they_come(failure: Failure) -> AsyncIterator[dict[str, int]]:
    for n in (1, 2):
        await asyncio.sleep(0)
        yield {"n": n}


def _in_downloader(ledger: LeaseLedger, errback: Any, on_failure: Any = None) -> Request:
    """A leased request in the downloader, its errback guarded."""
    ledger.take("L", 1, URL)
    request = Request(URL, errback=errback, meta={LEASE_META: "L"})
    ledger.guard(request, on_failure or (lambda request, exception: None))
    ledger.move("L", "downloading")
    return request


def _errback(request: Request, exception: BaseException) -> Any:
    """What the request's (guarded) errback returns for ``exception``, called as Scrapy's
    scraper calls it: the failure carrying its request."""
    failure = Failure(exception)  # type: ignore[no-untyped-call]
    failure.request = request  # type: ignore[attr-defined]
    assert request.errback is not None
    return request.errback(failure)


def _read(output: Any) -> list[Any]:
    """The errback's output, read as Scrapy reads it."""

    async def read() -> list[Any]:
        iterable = await output if inspect.iscoroutine(output) else output
        return [each async for each in as_async_generator(iterable)]

    return asyncio.run(read())


@pytest.mark.parametrize("errback", [_items, _items_later, _items_as_they_come])
def test_an_ignored_requests_lease_is_acked_once_its_errbacks_items_are_stored(
    errback: Any,
) -> None:
    ledger = LeaseLedger(get_crawler(), "w")
    request = _in_downloader(ledger, errback)
    assert ledger.to_errback(request)  # LeaseDownloaderMiddleware, for an IgnoreRequest

    assert _read(_errback(request, IgnoreRequest())) == [{"n": 1}, {"n": 2}]

    assert ledger.ops == []  # both items in the pipelines
    ledger.item_finished(request, stored=True)
    assert ledger.ops == []
    ledger.item_finished(request, stored=True)
    assert ledger.ops == [(ACK, "L", "2")]


def test_a_failure_raised_on_the_way_back_is_dead_lettered_once_the_errbacks_item_is_stored() -> (
    None
):
    """A process_response raised (no process_exception sees it): the guarded errback settles
    the lease as a dead letter, written once the errback's item left the pipelines."""
    ledger = LeaseLedger(get_crawler(), "w")

    def settle(request: Request, exception: BaseException) -> None:
        ledger.failed(request, "response_error:ValueError", str(exception))

    request = _in_downloader(ledger, _items, settle)
    assert len(_read(_errback(request, ValueError("bad")))) == 2
    ledger.item_finished(request, stored=True)
    ledger.item_finished(request)  # dropped
    ((op, lease, payload),) = ledger.ops
    assert (op, lease) == (DEAD, "L")
    assert json.loads(payload)["items_stored"] == 1


def test_an_errback_that_raises_or_lets_the_failure_go_on_ends_the_lease_at_once() -> None:
    ledger = LeaseLedger(get_crawler(), "w")

    def raises(failure: Failure) -> None:
        raise RuntimeError("errback bug")

    request = _in_downloader(ledger, raises)
    ledger.to_errback(request)
    with pytest.raises(RuntimeError):
        _errback(request, IgnoreRequest())
    assert ledger.ops == [(ACK, "L", "")]
    ledger = LeaseLedger(get_crawler(), "w")
    request = _in_downloader(ledger, lambda failure: failure)
    ledger.to_errback(request)
    ledger.failed(request, "download_error:TimeoutError", "took too long")
    assert ledger.ops == []
    assert isinstance(_errback(request, TimeoutError()), Failure)
    assert [op for op, _, _ in ledger.ops] == [DEAD]
