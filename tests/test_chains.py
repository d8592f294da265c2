"""Chains (``crawler/frontier/chains.py``): a page's next page on its own host goes on a turn
taken ahead, without a round trip, and is written as leased before its parent is acked."""

from __future__ import annotations

import itertools
import json
import time
from contextlib import ExitStack
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawler.frontier.chains import CHAIN_META, MOST_TURNS, Credits, chain_host, mark_chain, paced
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.leases import ACK, DEAD, LeaseLedger
from crawler.frontier.outbox import Adopted, Outbox, adopted
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys
from sandbox.data import ALL_CATEGORY, CATEGORIES
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox, poll
from tests.test_pacing import entry, pacing

KEYS = FrontierKeys("chained", "chained:start_urls")
WORKER = "w1"


@pytest.fixture
def frontier(redis_client: redis.Redis) -> Frontier:
    return Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))


def _ask(frontier: Frontier, credits: Credits, **rules: Any) -> int:
    pipe = frontier.server.pipeline(transaction=False)
    credits.queue_ask(pipe, frontier, pacing(**rules))
    return credits.given(pipe.execute()[0])


def _turns(credits: Credits, host: str) -> list[float]:
    times = []
    while (turn := credits.take(host)) is not None:
        times.append(turn.at)
    return times


def test_turns_taken_ahead_keep_the_hosts_pace(frontier: Frontier) -> None:
    """Turns of one host come one interval apart within the look-ahead, and a request queued
    for that host afterwards gets the turn after them: the host's pace holds for the fleet."""
    credits = Credits()
    credits.wanted.update({"a.test", "free.test"})
    now = time.time()
    given_turns = _ask(frontier, credits, rate=2.0, ahead=3.0, per_domain={"free.test": 0})
    times = _turns(credits, "a.test")
    assert given_turns == len(times) == 7  # now, then every 0.5 s up to 3 s ahead
    assert [round(b - a, 3) for a, b in itertools.pairwise(times)] == [0.5] * 6
    assert now - 0.1 < times[0] < now + 0.1
    assert times[-1] <= now + 3.1
    assert _turns(credits, "free.test") == []  # an unlimited host needs none
    frontier.schedule([entry("http://a.test/next")])
    popped = frontier.pop(5, 30, WORKER, pacing(rate=2.0, ahead=10.0))
    ((lease_id, _),) = popped.leased
    assert popped.dues[lease_id] == pytest.approx(times[-1] + 0.5, abs=1e-3)


def test_a_credit_holds_at_most_its_share(frontier: Frontier) -> None:
    credits = Credits()
    credits.wanted.add("a.test")
    assert _ask(frontier, credits, rate=100.0, ahead=10.0) == MOST_TURNS


def test_turns_gone_by_are_not_used_and_the_last_asks_for_more() -> None:
    """A turn more than one interval (here 0.5 s) late is dropped, not sent bunched with the
    next; taking the last turn left asks for more."""
    credits = Credits()
    now = time.time()
    times = ",".join(str(now + offset) for offset in (-2.0, -0.6, -0.4, 0.5, 1.0))
    assert credits.given([[b"a.test", 10, "2", times.encode()]]) == 5
    taken = credits.take("a.test")
    assert taken is not None
    assert (taken.seq, taken.at) == (12, now - 0.4)
    assert credits.take("a.test") is not None
    assert not credits.wanted
    assert credits.take("a.test") is not None
    assert "a.test" in credits.wanted  # the last one taken: more are wanted
    assert credits.take("a.test") is None


def _seal(frontier: Frontier, outbox: Outbox) -> list[Any]:
    pipe = frontier.server.pipeline(transaction=False)
    sealed = outbox.seal(pipe, frontier, WORKER, 30)
    replies = pipe.execute()
    outbox.sent()
    assert not outbox
    assert sealed.adopted
    return cast(list[Any], replies)


def _outbox() -> Outbox:
    return Outbox(LeaseLedger(get_crawler(), WORKER))


def test_a_kept_request_of_a_dead_worker_comes_back_to_the_queue(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    outbox = _outbox()
    record = entry("http://a.test/p2").json
    outbox.adopted.append(adopted(41, 3, record))
    _seal(frontier, outbox)
    assert redis_client.hget(KEYS.owner, "41:3") == WORKER.encode()
    redis_client.zadd(KEYS.leases, {"41:3": 0})  # its worker died: the lease expired
    popped = frontier.pop(5, 30, "w2")
    assert popped.reclaimed == 1
    assert [data for _, data in popped.leased] == [record]
    assert popped.leased[0][0].endswith(":3")  # its priority kept


def test_a_kept_request_acked_before_any_trip_writes_nothing(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    outbox = _outbox()
    outbox.adopted += [adopted(7, 0, entry("http://a.test/p").json)]
    outbox.adopted += [adopted(8, 0, entry("http://a.test/q").json)]
    for lease_id in ("7", "8"):
        outbox.leases.take(lease_id, 1, "")
    outbox.leases.end("7", ACK)
    outbox.leases.end("8", DEAD, json.dumps({"reason": "x"}))
    _seal(frontier, outbox)
    assert redis_client.hlen(KEYS.data) == 0
    assert redis_client.zcard(KEYS.leases) == 0
    (letter,) = frontier.dead_letters()
    assert letter["request"]["url"] == "http://a.test/q"  # a dead letter keeps its request


def test_a_failed_trip_keeps_the_kept_requests() -> None:
    outbox = _outbox()
    kept = Adopted("5", "{}")
    outbox.adopted.append(kept)
    sealed = outbox.seal(redis.Redis().pipeline(), _fake_frontier(), WORKER, 30)
    outbox.adopted.append(Adopted("6", "{}"))
    outbox.unsent(sealed)
    assert [entry.lease_id for entry in outbox.adopted] == ["5", "6"]
    assert outbox  # and they wait for the next trip


def _fake_frontier() -> Frontier:
    return Frontier(redis.Redis(port=1), KEYS, DupefilterConfig(mode="none"))


URLS = st.one_of(
    st.sampled_from(["http://a.test/x", "https://A.test:8080/y", "ftp://a.test/", "http://[::1]/"]),
    st.text(max_size=40),
    st.builds(
        lambda host, path: f"http://{host}/{path}", st.text(max_size=12), st.text(max_size=8)
    ),
)


@given(parent=URLS, child=URLS, dont_filter=st.booleans())
def test_only_a_request_for_its_pages_own_host_is_chained(
    parent: str, child: str, dont_filter: bool
) -> None:
    """Whatever the URLs, marking never fails, the mark never reaches Redis (the scheduler
    takes it off), and only a dont_filter request for the parent's http(s) host is marked."""
    try:
        made, by = Request(child, dont_filter=dont_filter), Request(parent)
    except ValueError:
        return  # Scrapy refuses the URL before any scheduler sees it
    mark_chain(made, by)
    host = chain_host(made)
    assert CHAIN_META not in made.meta
    if host is not None:
        assert dont_filter
        assert urlsplit(made.url).scheme.lower() in ("http", "https")
        assert host == urlsplit(made.url).hostname == urlsplit(by.url).hostname


def test_a_request_due_later_or_with_its_own_delay_is_not_chained() -> None:
    by = Request("http://a.test/1")
    for meta in ({"frontier_due": time.time() + 60}, {"crawl_delay": 3}):
        made = Request("http://a.test/2", dont_filter=True, meta=dict(meta))
        mark_chain(made, by)
        assert chain_host(made) is None


# --- crawls -------------------------------------------------------------------------------

CATEGORY = 1
PAGE_SIZE = 2
PAGES = -(-len(build_dataset().videos_by_category[CATEGORY]) // PAGE_SIZE)


def _settings(rate: float, page_size: int = PAGE_SIZE) -> dict[str, Any]:
    return {
        "POLITENESS_RATE": rate,
        "POLITENESS_BURST": 1,
        "EXPLORE_PAGE_SIZE": page_size,
        "EXPLORE_HANDOFF_SPIDER": "",
        "STATS_PUBLISH_INTERVAL": 0.5,
        "IDLE_POLL_INTERVAL": 1,
    }


def _feed_pages(sandbox: Sandbox) -> dict[str, int]:
    stats = sandbox.admin("stats")
    return {path: n for path, n in stats["by_path"].items() if "categoryType" in path}


def _left(client: redis.Redis) -> dict[str, int]:
    keys = ("{explore}:leases", "{explore}:delayed", "{explore}:data", "{explore}:owner")
    return {key: int(client.exists(key)) for key in keys}


@pytest.mark.integration
def test_two_workers_read_feeds_on_turns_taken_ahead_at_the_hosts_pace(
    crawl: Crawl, sandbox: Sandbox, redis_client: redis.Redis
) -> None:
    """Two workers, one feed each, on one host at 5 requests/s: every page once, most of
    them on turns taken ahead, the host's pace kept (the turns of both workers come from one
    bucket), every video stored, nothing left."""
    categories = (CATEGORY, CATEGORY + 1)
    settings = _settings(5.0, page_size=4)
    with ExitStack() as running:
        workers = [
            running.enter_context(
                crawl.background("explore", "-a", f"categories={category}", settings=settings)
            )
            for category in categories
        ]
        for worker in workers:
            worker.wait(120)
            assert worker.returncode == 0, worker.log_text()[-3000:]
    dataset = build_dataset()
    feeds = [-(-len(dataset.videos_by_category[category]) // 4) for category in categories]
    pages = _feed_pages(sandbox)
    assert len(pages) == sum(feeds)
    assert set(pages.values()) == {1}
    first = sandbox.admin("stats")["first_seen"]
    times = sorted(first[path] for path in pages)
    # At most 5 pages a second: any 6 in a row span 5 intervals, less one a late turn may lose
    # to the next (sent late, the next on time) and the send jitter of a loaded machine.
    spans = [later - earlier for earlier, later in zip(times[:-5], times[5:], strict=True)]
    assert min(spans) >= 5 * 0.2 - 0.3
    videos = sum(len(dataset.videos_by_category[category]) for category in categories)
    assert crawl.mongo.db.videos.count_documents({}) == videos
    chained = int(redis_client.hget("{explore}:stats", "frontier/chained") or 0)
    # A feed's first page comes from its start entry, its second through the queue (its pop
    # takes the turns ahead); after that, one more now and then when the turns run out.
    assert chained >= sum(feeds) - 8, (chained, feeds)
    assert _left(redis_client) == dict.fromkeys(_left(redis_client), 0)


@pytest.mark.integration
def test_a_worker_killed_mid_chain_loses_no_page(
    crawl: Crawl, sandbox: Sandbox, redis_client: redis.Redis
) -> None:
    """kill -9 while pages wait on turns taken ahead: another worker reads the rest of the
    feed (the killed one's leases come back), every video is stored, nothing is left."""
    settings = {**_settings(4.0, page_size=4), "FRONTIER_LEASE_SECONDS": 5}
    pages_in_all = -(-len(build_dataset().videos_by_category[CATEGORY]) // 4)
    arguments = ("-a", f"categories={CATEGORY}")
    _kill_once_counted(crawl, redis_client, arguments, settings, "frontier/chained")
    assert len(_feed_pages(sandbox)) < pages_in_all  # killed mid-feed
    videos = len(build_dataset().videos_by_category[CATEGORY])
    _finish_all(crawl, sandbox, redis_client, settings, pages_in_all, videos)


def _kill_once_counted(
    crawl: Crawl, redis_client: redis.Redis, arguments: tuple[str, ...], settings: Any, stat: str
) -> None:
    """Run explore with ``arguments``; kill -9 it once the fleet's ``stat`` reaches 3."""
    with crawl.background("explore", *arguments, settings=settings) as worker:
        poll(
            lambda: int(redis_client.hget("{explore}:stats", stat) or 0) >= 3,
            timeout=60,
            what=stat,
        )
        worker.kill()


def _finish_all(
    crawl: Crawl,
    sandbox: Sandbox,
    redis_client: redis.Redis,
    settings: Any,
    pages: int,
    videos: int,
) -> None:
    """Another worker reads the feeds to their ends: every page, every video, nothing left."""
    result = crawl("explore", settings=settings, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(_feed_pages(sandbox)) == pages
    assert crawl.mongo.db.videos.count_documents({}) == videos
    assert _left(redis_client) == dict.fromkeys(_left(redis_client), 0)


def test_a_host_whose_turns_are_all_taken_is_booked_for_the_look_ahead(
    frontier: Frontier,
) -> None:
    """Asked for turns of a host at 2 requests/s with a 1 s look-ahead: the first ask gets
    them all; the next gets none, and the host is booked until the look-ahead has passed."""
    credits = Credits()
    credits.wanted.add("a.test")
    pipe = frontier.server.pipeline(transaction=False)
    asked = credits.queue_ask(pipe, frontier, pacing(rate=2.0, ahead=1.0))
    assert credits.given(pipe.execute()[0], asked, 1.0) >= 2
    assert not credits.booked("a.test")
    credits.wanted.add("a.test")
    pipe = frontier.server.pipeline(transaction=False)
    asked = credits.queue_ask(pipe, frontier, pacing(rate=2.0, ahead=1.0))
    assert credits.given(pipe.execute()[0], asked, 1.0) == 0
    assert credits.booked("a.test")
    assert not credits.booked("b.test")
    poll(lambda: not credits.booked("a.test"), timeout=5, what="the look-ahead passed")


def test_a_host_with_a_rate_of_its_own_of_zero_takes_no_turns() -> None:
    """A rate of 0 is unlimited, for one host or for all: such a host's chain is not kept on
    turns (nor asked for any, nor booked); a paced host's own rate wins over an unlimited
    default."""
    one_free = pacing(rate=0.5, per_domain={"api.test": 0.0})
    assert not paced(one_free, "api.test")
    assert paced(one_free, "www.test")
    one_paced = pacing(rate=0.0, per_domain={"slow.test": 0.2})
    assert paced(one_paced, "slow.test")
    assert not paced(one_paced, "fast.test")
    assert paced(one_paced, "www.slow.test")  # a domain's rate covers its hosts
    assert not paced(one_free, "v2.api.test")


def test_turns_taken_ahead_keep_a_domains_rate_for_its_hosts(frontier: Frontier) -> None:
    """POLITENESS_DOMAIN_RATES {"tiktok.test": 1} paces the turns a feed's next pages take on
    www.tiktok.test as the pop paces that host: one a second, not the default's two."""
    credits = Credits()
    credits.wanted.add("www.tiktok.test")
    _ask(frontier, credits, rate=2.0, ahead=3.0, per_domain={"tiktok.test": 1.0})
    times = _turns(credits, "www.tiktok.test")
    assert [round(b - a, 3) for a, b in itertools.pairwise(times)] == [1.0] * (len(times) - 1)
    assert len(times) >= 3


def test_a_push_for_a_booked_host_waits_for_a_trip_that_goes_anyway() -> None:
    """A new request that may wait does not make a round trip go at the next tick; it goes
    with the acknowledgements, within their hold, or with any trip before; an eager one goes
    at once, and a failed trip keeps it eager."""
    booked, eager, later = (entry(f"http://a.test/{name}") for name in ("b", "e", "l"))
    outbox = _outbox()
    outbox.push(booked, eager=False)
    assert outbox
    assert not outbox.due(hold=60)
    assert outbox.due(hold=0)
    sealed = outbox.seal(redis.Redis().pipeline(), _fake_frontier(), WORKER, 30)
    assert sealed.pushes == [booked]
    assert not outbox
    outbox.sent()
    outbox.push(eager)
    assert outbox.due(hold=60)
    sealed = outbox.seal(redis.Redis().pipeline(), _fake_frontier(), WORKER, 30)
    assert not outbox.due(hold=60)
    outbox.push(later, eager=False)
    outbox.unsent(sealed)
    assert outbox.pushes == [eager, later]
    assert outbox.due(hold=60)


@pytest.mark.integration
def test_feeds_outnumbering_their_hosts_turns_wait_in_the_outbox_and_lose_nothing(
    crawl: Crawl, sandbox: Sandbox, redis_client: redis.Redis
) -> None:
    """Eleven feeds on one host at 6 requests/s with a 1.25 s look-ahead (more feeds than the
    look-ahead has turns): their next pages wait for a round trip that goes anyway instead of
    making their own. kill -9 while they wait: another worker reads every feed to its end,
    every video is stored, nothing is left."""
    categories = [category for category in CATEGORIES if category != ALL_CATEGORY][:11]
    settings = {**_settings(6.0, page_size=10), "FRONTIER_LEASE_SECONDS": 5}
    dataset = build_dataset()
    feeds = sum(-(-len(dataset.videos_by_category[c]) // 10) for c in categories)
    arguments = ("-a", "categories=" + ",".join(map(str, categories)))
    _kill_once_counted(crawl, redis_client, arguments, settings, "frontier/pushes_waited")
    assert len(_feed_pages(sandbox)) < feeds  # killed mid-feeds
    videos = {video.id for c in categories for video in dataset.videos_by_category[c]}
    _finish_all(crawl, sandbox, redis_client, settings, feeds, len(videos))


def test_hosts_whose_turns_are_gone_are_forgotten(frontier: Frontier) -> None:
    """A sweep of many hosts, each chained once, leaves no per-host state behind."""
    credits = Credits()
    now = time.time()
    for n in range(50):
        credits.given([[f"h{n}.test".encode(), n, "2", f"{now - 5},{now - 4}".encode()]])
    credits.given([[b"live.test", 99, "2", f"{now + 5}".encode()]])
    assert credits.take("h0.test") is None  # its turns are gone: it is wanted again
    credits.wanted.add("x.test")
    _ask(frontier, credits, rate=2.0, ahead=1.0)
    assert set(credits._turns) == {"live.test", "x.test", "h0.test"}
    assert set(credits._interval) == {"live.test", "x.test", "h0.test"}
