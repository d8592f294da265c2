"""Recrawl pieces on their own: the interval rule (hypothesis), content hashes, the revisit
store and the hand-off's expiry on real Redis, the history upsert on the MongoDB-wire server,
and the middleware on a real crawler."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pymongo
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.config.rules import SettingsError
from crawler.frontier.riders import Riders
from crawler.handoff import Handoff, RidingHandoff
from crawler.items import PageItem, ProfileItem
from crawler.meta import PACED_META, SENT_AT_META, SENT_BACK_META, SENT_META
from crawler.preflight import check_settings
from crawler.recrawl import RecrawlMiddleware, RecrawlPolicy, RevisitStore
from crawler.recrawl.policy import MAX_URGENCY
from crawler.recrawl.revisits import RECRAWL_META, items_hash
from crawler.recrawl.store import Revisit
from crawler.spiders.profiles import ProfilesSpider
from crawler.storage.changes import content_hash, history_update, item_hash, with_change_hash
from tests.harness import Mongo, poll, scrapy

intervals = st.floats(min_value=0.01, max_value=1e7, allow_nan=False)


@st.composite
def policies(draw: st.DrawFn) -> RecrawlPolicy:
    low, mid, high = sorted(draw(st.lists(intervals, min_size=3, max_size=3)))
    return RecrawlPolicy(initial=mid, minimum=low, maximum=high)


@given(policies(), st.none() | intervals, st.none() | st.booleans())
def test_the_interval_stays_within_its_bounds(
    policy: RecrawlPolicy, previous: float | None, changed: bool | None
) -> None:
    assert policy.minimum <= policy.next_interval(previous, changed) <= policy.maximum


@given(policies(), intervals)
def test_unchanged_pages_wait_twice_as_long_changed_ones_half(
    policy: RecrawlPolicy, previous: float
) -> None:
    unchanged = policy.next_interval(previous, changed=False)
    changed = policy.next_interval(previous, changed=True)
    assert changed <= policy.clamp(previous) <= unchanged
    if policy.minimum <= previous / 2 and previous * 2 <= policy.maximum:
        assert (changed, unchanged) == (previous / 2, previous * 2)


@given(policies())
def test_a_first_visit_waits_the_initial_interval(policy: RecrawlPolicy) -> None:
    assert policy.next_interval(None, None) == policy.initial


@given(policies(), intervals, intervals)
def test_pages_that_change_more_often_go_first(
    policy: RecrawlPolicy, short: float, long: float
) -> None:
    short, long = sorted((short, long))
    assert policy.urgency(long) <= policy.urgency(short) <= MAX_URGENCY
    assert policy.urgency(policy.maximum) == 0


@pytest.mark.parametrize(
    ("initial", "minimum", "maximum"), [(1, 2, 3), (4, 2, 3), (0, 0, 1), (1, 1, 0.5)]
)
def test_bounds_out_of_order_are_refused(initial: float, minimum: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="minimum"):
        RecrawlPolicy(initial=initial, minimum=minimum, maximum=maximum)


def test_an_initial_interval_outside_its_bounds_stops_the_crawl() -> None:
    settings = get_project_settings()
    settings.setdict({"RECRAWL_INITIAL_INTERVAL": 10, "RECRAWL_MAX_INTERVAL": 5}, "cmdline")
    with pytest.raises(SettingsError, match="RECRAWL_INITIAL_INTERVAL = 10: must be a number"):
        check_settings(settings)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_the_content_hash_ignores_field_order_and_volatile_fields(item: dict[str, Any]) -> None:
    reordered = dict(reversed(list(item.items())))
    assert item_hash(item) == item_hash(reordered)
    assert item_hash({**item, "fetched_at": 1.0}) == item_hash({**item, "fetched_at": 2.0})
    assert item_hash({**item, "_x": 1}) != item_hash({**item, "_x": 2})


def test_the_content_hash_follows_the_item_class_volatile_fields() -> None:
    page = PageItem("https://a/", "a", 200, "https://a/", 1, 1.0, "h", 10, 3)
    later = PageItem("https://a/", "a", 200, "https://a/", 2, 9.0, "h", 10, 3)
    changed = PageItem("https://a/", "a", 200, "https://a/", 1, 1.0, "other", 10, 3)
    ignored = PageItem.volatile_fields
    assert content_hash([vars(page)], ignored) == content_hash([vars(later)], ignored)
    assert content_hash([vars(page)], ignored) != content_hash([vars(changed)], ignored)


# --- the revisit store on real Redis -----------------------------------------------------------


def test_one_waiting_revisit_per_page(redis_client: redis.Redis) -> None:
    store = RevisitStore(redis_client, "s")
    assert store.add([Revisit("aa", 100.0, '{"url": "1"}'), Revisit("bb", 200.0, "{}")]) == 2
    # A revisit replaces the waiting one; a page fetched outside its revisits keeps it.
    assert store.add([Revisit("aa", 150.0, '{"url": "2"}', replace=True)]) == 1
    assert store.add([Revisit("aa", 50.0, '{"url": "3"}', replace=False)]) == 0
    assert store.due_times() == {"aa": 150.0, "bb": 200.0}
    assert redis_client.hget("{s}:revisit:data", "aa") == b'{"url": "2"}'


def test_a_claimed_revisit_leaves_only_once_the_frontier_has_it(
    redis_client: redis.Redis,
) -> None:
    store = RevisitStore(redis_client, "s")
    store.add([Revisit("aa", 10.0, "A"), Revisit("bb", 20.0, "B"), Revisit("cc", 99.0, "C")])
    claim = store.claim(10, hold=5.0, now=30.0)
    assert claim.revisits == [("aa", "A"), ("bb", "B")]
    assert claim.next_due == 35.0  # the claimed ones, should their claimer die
    held = store.claim(10, hold=5.0, now=31.0)
    assert (held.revisits, held.next_due) == ([], 35.0)  # held for the claimer
    # A worker that died with the claim: the revisits come due again after the hold.
    assert [fp for fp, _ in store.claim(10, hold=5.0, now=36.0).revisits] == ["aa", "bb"]
    # "bb" was fetched and written again meanwhile: completing the claim keeps it.
    again = store.claim(10, hold=5.0, now=50.0)
    store.add([Revisit("bb", 80.0, "B2")])
    assert store.complete(again) == 1
    assert store.due_times() == {"bb": 80.0, "cc": 99.0}


def test_revisits_are_counted_by_when_they_are_due(redis_client: redis.Redis) -> None:
    store = RevisitStore(redis_client, "s")
    now = 1_000_000.0
    due = [now - 5, now, now + 10, now + 3599, now + 3601, now + 86_400]
    store.add([Revisit(str(index), when, "{}") for index, when in enumerate(due)])
    assert store.counts(now) == {"due": 2, "next_hour": 2, "later": 2}


# --- the hand-off remembers an author for its TTL only ---------------------------------------


def test_an_author_is_handed_over_again_once_the_record_expires(
    redis_client: redis.Redis,
) -> None:
    handoff = Handoff(redis_client, "profiles:start_urls", "{explore}:handed_until", ttl=0.5)
    entries: dict[str, dict[str, object]] = {"a": {"unique_id": "a"}, "b": {"unique_id": "b"}}
    assert handoff.hand_over(entries) == ["a", "b"]
    assert handoff.hand_over(entries) == []
    poll(lambda: handoff.hand_over({"a": entries["a"]}) == ["a"], timeout=5, what="expiry")
    # Expired records are trimmed as new ones are written: the set holds the last TTL only.
    assert redis_client.zrange("{explore}:handed_until", 0, -1) == [b"a"]
    pushed = [json.loads(raw) for raw in redis_client.lrange("profiles:start_urls", 0, -1)]
    assert sorted(entry["unique_id"] for entry in pushed) == ["a", "a", "b"]


def test_a_hand_off_redis_refuses_is_said_once_and_tried_again(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The receiving spider's start list is a set (scrapy-redis's REDIS_START_URLS_AS_SET): the
    hand-off waits and is tried again, and an ERROR says why, once."""
    redis_client.sadd("profiles:start_urls", "left.over")
    riders = Riders()
    riders.carried = True
    handoff = Handoff(redis_client, "profiles:start_urls", "{explore}:handed")
    riding = RidingHandoff(handoff, riders, cast(Any, _NoLedger()), 0.0, lambda n: None)
    riding.hand_over({"a.b": {"unique_id": "a.b"}}, Request("https://x.test/feed"))
    for _ in range(3):
        riders.send(redis_client)
    refused = [r for r in caplog.records if r.levelname == "ERROR" and "refused" in r.message]
    assert len(refused) == 1
    assert "profiles:start_urls" in refused[0].message
    redis_client.delete("profiles:start_urls")
    riders.send(redis_client)
    assert redis_client.lrange("profiles:start_urls", 0, -1) == [b'{"unique_id": "a.b"}']


class _NoLedger:
    class ledger:
        @staticmethod
        def item_started(request: Request) -> None: ...

        @staticmethod
        def item_finished(request: Request) -> None: ...


def test_an_author_whose_profile_has_a_revisit_waiting_is_not_handed_over(
    redis_client: redis.Redis,
) -> None:
    """Its revisits keep it fresh at its own interval: handing it over again (past the TTL)
    would fetch it once more whatever that interval."""
    revisits = ("{profiles}:revisit", lambda key: f"fp-{key}")
    handoff = Handoff(redis_client, "profiles:start_urls", "{explore}:handed", revisits=revisits)
    RevisitStore(redis_client, "profiles").add([Revisit("fp-a", time.time() + 9e5, "{}")])
    entries: dict[str, dict[str, object]] = {"a": {"unique_id": "a"}, "b": {"unique_id": "b"}}
    assert handoff.hand_over(entries) == ["b"]


_AUTHORS = st.text(min_size=1, max_size=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.lists(_AUTHORS, unique=True, max_size=8),
    marked=st.dictionaries(_AUTHORS, st.sampled_from([-60.0, 60.0]), max_size=8),
    waiting=st.sets(_AUTHORS, max_size=4),
    data=st.recursive(st.none() | st.integers() | st.text(max_size=8), st.lists, max_leaves=4),
)
def test_the_hand_off_script_hands_over_what_checking_then_pushing_would(
    redis_client: redis.Redis,
    keys: list[str],
    marked: dict[str, float],
    waiting: set[str],
    data: object,
) -> None:
    """Any authors (any text), some handed over lately or long ago, some with a revisit
    waiting: the one script (a Redis server) pushes the same entries in the same order and
    leaves the same marks as the check, then the push (the way on a cluster)."""
    entries: dict[str, dict[str, object]] = {key: {"unique_id": key, "data": data} for key in keys}
    outcomes = []
    for atomic in (True, False):
        redis_client.delete("profiles:start_urls", "{explore}:handed", "{profiles}:revisit")
        now = time.time()
        if marked:
            redis_client.zadd("{explore}:handed", {k: now + v for k, v in marked.items()})
        if waiting:
            redis_client.zadd("{profiles}:revisit", {f"fp-{key}": now + 900 for key in waiting})
        revisits = ("{profiles}:revisit", lambda key: f"fp-{key}")
        handoff = Handoff(redis_client, "profiles:start_urls", "{explore}:handed", 30, revisits)
        handoff.atomic = atomic
        handed = handoff.hand_over(entries)
        pushed = [json.loads(raw) for raw in redis_client.lrange("profiles:start_urls", 0, -1)]
        marks: Any = redis_client.zrange("{explore}:handed", 0, -1, withscores=True)
        live = [key.decode() for key, score in marks if score > now]  # expired: as if absent
        outcomes.append((handed, pushed, live))
    assert outcomes[0] == outcomes[1]
    handed = outcomes[0][0]
    assert handed == [k for k in sorted(keys) if marked.get(k, -1) < 0 and k not in waiting]
    assert outcomes[0][1] == [entries[key] for key in reversed(handed)]  # LPUSH order


# --- the history upsert on the MongoDB-wire server -------------------------------------------


def test_documents_keep_first_seen_last_seen_last_changed_and_change_count(mongo: Mongo) -> None:
    collection = mongo.db.history
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def store(fields: dict[str, Any], day: int) -> dict[str, Any]:
        document = with_change_hash({"key": "k", **fields}, ["fetched_at"])
        update = history_update(document, start + timedelta(days=day))
        collection.bulk_write([pymongo.UpdateOne({"key": "k"}, update, upsert=True)])
        found: dict[str, Any] = collection.find_one({"key": "k"}, {"_id": 0})
        return found

    first = store({"price": 5, "name": "$money", "fetched_at": 1}, 0)
    assert first["name"] == "$money"  # values are stored as given, never read as expressions
    same = store({"price": 5, "name": "$money", "fetched_at": 2}, 1)
    changed = store({"price": 6, "name": "$money", "fetched_at": 3}, 2)
    days = {
        name: (changed[name].replace(tzinfo=UTC) - start).days
        for name in changed
        if name in ("first_seen", "last_seen", "last_changed")
    }
    assert (first["change_count"], same["change_count"], changed["change_count"]) == (0, 0, 1)
    assert same["last_changed"] == first["last_changed"]
    assert days == {"first_seen": 0, "last_seen": 2, "last_changed": 2}
    assert collection.count_documents({}) == 1


# --- the middleware on a real crawler ----------------------------------------------------------


class _Profiles(ProfilesSpider):
    """The profiles spider with intervals of 100 s (10..1000), without jitter."""

    custom_settings = {  # noqa: RUF012 (as Scrapy's Spider declares it)
        **ProfilesSpider.custom_settings,
        "RECRAWL_INITIAL_INTERVAL": 100,
        "RECRAWL_MIN_INTERVAL": 10,
        "RECRAWL_MAX_INTERVAL": 1000,
        "RECRAWL_JITTER": 0,
    }


def _middleware(redis_url: str) -> RecrawlMiddleware:
    project = {name: getattr(project_settings, name) for name in dir(project_settings)}
    settings = {name: value for name, value in project.items() if name.isupper()}
    crawler = get_crawler(_Profiles, settings_dict={**settings, "REDIS_URL": redis_url})
    crawler.spider = crawler._create_spider()
    return RecrawlMiddleware.from_crawler(crawler)


def _visit(middleware: RecrawlMiddleware, request: Request, *items: Any) -> list[Any]:
    response = HtmlResponse(request.url, body=b"<html></html>", request=request)

    async def output() -> AsyncIterator[Any]:
        for item in items:
            yield item

    async def consume() -> list[Any]:
        return [out async for out in middleware.process_spider_output(response, output())]

    return asyncio.run(consume())


def _waiting(redis_client: redis.Redis) -> dict[str, Any]:
    (raw,) = redis_client.hvals("{profiles}:revisit:data")
    return dict(json.loads(raw))


def test_a_page_with_items_gets_its_next_visit_adapted_to_its_changes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    middleware = _middleware(redis_url)
    settings = middleware.crawler.settings
    headers = {"User-Agent": settings["USER_AGENT"], "X-Token": "kept"}
    meta = {"download_latency": 1, "download_timeout": settings.getfloat("DOWNLOAD_TIMEOUT")}
    # What the send gate left on it (never stored): 40 bytes of each waiting revisit, before.
    meta |= {SENT_AT_META: time.time(), SENT_META: time.time(), PACED_META: 0.0}
    request = Request("https://www.tiktok.com/@a", headers=headers, meta=meta, priority=3)
    item = ProfileItem("a", "ok", follower_count=1)
    assert _visit(middleware, request, item) == [item]
    assert middleware.flush()
    first = _waiting(redis_client)
    state = first["meta"][RECRAWL_META]
    assert {"method", "body"}.isdisjoint(first)  # defaults are left out
    assert first["headers"] == {"X-Token": [{"__bytes__": "a2VwdA=="}]}
    # Past the duplicate filter for its own URL only (a redirect of it is filtered as usual).
    assert not first.get("dont_filter")
    assert (state["interval"], first["meta"].keys()) == (100, {RECRAWL_META, SENT_BACK_META})
    assert first["meta"][SENT_BACK_META] == request.url
    (due,) = RevisitStore(redis_client, "profiles").due_times().values()
    assert due == pytest.approx(time.time() + 100, abs=5)

    revisit = Request(request.url, meta={RECRAWL_META: state}, priority=first["priority"])
    _visit(middleware, revisit, item)  # unchanged: twice as long
    middleware.flush()
    unchanged = _waiting(redis_client)
    assert unchanged["meta"][RECRAWL_META]["interval"] == 200
    changed_item = ProfileItem("a", "ok", follower_count=2)
    again = Request(request.url, meta={RECRAWL_META: unchanged["meta"][RECRAWL_META]})
    _visit(middleware, again, changed_item)  # changed: half as long, and sooner in the queue
    middleware.flush()
    changed = _waiting(redis_client)
    assert changed["meta"][RECRAWL_META]["interval"] == 100
    assert changed["priority"] > unchanged["priority"] >= 3
    assert redis_client.zcard("{profiles}:revisit") == 1


def _full_profile(followers: int | None) -> ProfileItem:
    fields: dict[str, Any] = dict.fromkeys(ProfileItem.kept_fields, "x")
    fields |= {name: 1 for name in ProfileItem.kept_fields if name.endswith("_count")}
    fields |= {"verified": True, "private": False, "follower_count": followers}
    return ProfileItem("a", "ok", **fields)


def test_a_visit_answering_a_count_null_neither_speeds_nor_slows_the_revisits(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A page answering its followers null (the store keeps the count before) tells nothing
    of a change, nor does the next visit that gives them again: the interval stays; a page
    that stops giving them (a private profile) is compared as usual from then on."""
    middleware = _middleware(redis_url)
    url = "https://www.tiktok.com/@a"
    intervals = []
    state = None
    for followers in (5, 5, None, 5, None, 6):
        meta: dict[str, Any] = {} if state is None else {RECRAWL_META: state}
        _visit(middleware, Request(url, meta=meta), _full_profile(followers))
        middleware.flush()
        state = _waiting(redis_client)["meta"][RECRAWL_META]
        intervals.append(state["interval"])
    for followers in (None, None, 6, 6):
        _visit(middleware, Request(url, meta={RECRAWL_META: state}), _full_profile(followers))
        middleware.flush()
        state = _waiting(redis_client)["meta"][RECRAWL_META]
        intervals.append(state["interval"])
    # first, unchanged, then each visit knowing other fields than the one before tells nothing
    # (null, back, null, back); two nulls in a row are unchanged, then back, then unchanged
    assert intervals == [100, 200, 200, 200, 200, 200, 200, 400, 400, 800]


def test_pages_without_items_or_with_dont_recrawl_are_not_revisited(
    redis_url: str, redis_client: redis.Redis
) -> None:
    middleware = _middleware(redis_url)
    _visit(middleware, Request("https://www.tiktok.com/@a", meta={"dont_recrawl": True}), {"x": 1})
    _visit(middleware, Request("https://www.tiktok.com/@b"), Request("https://www.tiktok.com/@c"))
    middleware.flush()
    assert redis_client.zcard("{profiles}:revisit") == 0


def test_a_none_among_a_pages_output_does_not_cost_its_revisit(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Scrapy skips a None a callback yields: the page's item still gets its next visit."""
    middleware = _middleware(redis_url)
    item = ProfileItem("a", "ok", follower_count=1)
    assert _visit(middleware, Request("https://www.tiktok.com/@a"), item, None) == [item, None]
    assert middleware.flush()
    assert redis_client.zcard("{profiles}:revisit") == 1
    assert middleware.crawler.stats is not None
    assert not middleware.crawler.stats.get_value("recrawl/not_revisited")


def test_waiting_revisits_show_in_scrapy_frontier_and_scrapy_status(
    redis_url: str, redis_client: redis.Redis
) -> None:
    now = time.time()
    due = {"a": now - 1, "b": now + 60, "c": now + 120, "d": now + 7200}
    RevisitStore(redis_client, "profiles").add([Revisit(k, v, "{}") for k, v in due.items()])
    env = {**os.environ, "REDIS_URL": redis_url}

    def command(*args: str) -> str:
        done = scrapy(*args, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    frontier = json.loads(command("frontier", "profiles", "--json"))
    assert frontier["revisits"] == {"due": 1, "next_hour": 2, "later": 1}
    assert "revisits  1 due now, 2 in the next hour, 1 later" in command("status", "profiles")


def test_output_that_cannot_be_revisited_is_counted_and_passed_on(
    redis_url: str, redis_client: redis.Redis
) -> None:
    middleware = _middleware(redis_url)
    unserializable = Request("https://www.tiktok.com/@a", meta={"when": object()})
    assert _visit(middleware, unserializable, {"x": 1}) == [{"x": 1}]
    assert _visit(middleware, Request("https://www.tiktok.com/@b"), 5) == [5]
    middleware.flush()
    assert middleware.crawler.stats is not None
    assert middleware.crawler.stats.get_value("recrawl/not_revisited") == 2
    assert redis_client.zcard("{profiles}:revisit") == 0


def test_a_new_signature_of_the_same_avatar_is_not_a_change() -> None:
    avatar = "https://p16.tiktokcdn.com/a.jpeg?x-expires={}&x-signature={}"
    first = ProfileItem("a", "ok", avatar_url=avatar.format(1, "x"), follower_count=1)
    resigned = ProfileItem("a", "ok", avatar_url=avatar.format(2, "y"), follower_count=1)
    more = ProfileItem("a", "ok", avatar_url=avatar.format(2, "y"), follower_count=2)
    assert items_hash([first]) == items_hash([resigned]) != items_hash([more])


def test_explore_looks_for_the_revisit_under_the_profiles_spiders_fingerprint(
    redis_url: str,
) -> None:
    from crawler.spiders.explore import ExploreSpider

    profiles = _middleware(redis_url).crawler
    settings = {**profiles.settings.copy_to_dict(), "EXPLORE_HANDOFF_SPIDER": "profiles"}
    explore = get_crawler(ExploreSpider, settings_dict=settings)
    spider = explore._create_spider()
    assert isinstance(spider, ExploreSpider)
    assert spider.handoff is not None
    assert spider.handoff.handoff.revisits is not None
    key, fingerprint = spider.handoff.handoff.revisits
    assert isinstance(profiles.spider, ProfilesSpider)
    page = profiles.spider._user_request("some.user")
    expected = profiles.request_fingerprinter.fingerprint(page)[:16].hex()
    assert (key, fingerprint("some.user")) == ("{profiles}:revisit", expected)


def test_explore_says_when_its_hand_off_spider_is_none_of_the_projects(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """EXPLORE_HANDOFF_SPIDER = "profile" (a typo) hands authors to a start list no spider of
    the project reads: the explore worker says so as it starts (another project may read it)."""
    from crawler.spiders.explore import ExploreSpider

    base = _middleware(redis_url).crawler.settings.copy_to_dict()
    for target, warned in (("profile", True), ("profiles", False)):
        caplog.clear()
        explore = get_crawler(ExploreSpider, {**base, "EXPLORE_HANDOFF_SPIDER": target})
        with caplog.at_level(logging.WARNING):
            explore._create_spider()
        said = [
            r.getMessage() for r in caplog.records if "EXPLORE_HANDOFF_SPIDER" in r.getMessage()
        ]
        assert bool(said) == warned, said
        if warned:
            assert "is no spider of this project" in said[0]
            assert "profile:start_urls" in said[0]
