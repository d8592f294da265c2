"""The maps spider over searches that overlap as Google's do (the sandbox's ``maps_overlap``):
each place page is fetched once per crawl, whichever searches list it, and revisited once."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from crawler.extractors.maps import place_id_from_url
from crawler.keys import revisit_keys
from crawler.meta import SENT_BACK_META
from crawler.recrawl.store import Revisit, RevisitStore
from crawler.spiders.maps_fingerprint import PlaceFingerprinter
from sandbox.places import build_places
from tests.harness import Crawl, Sandbox
from tests.test_maps import _log_stats, assert_place_fields, needs_chromium

PLACES = build_places()
QUERIES = ("shop near 01001", "shop near 01002", "shop near 01003")


def _place_fetches(sandbox: Sandbox) -> Counter[str]:
    """The place pages the sandbox served, counted by place (feature id), whatever the link."""
    fetches: Counter[str] = Counter()
    for path, count in sandbox.admin("stats")["by_path"].items():
        if path.startswith("/maps/place/"):
            fetches[place_id_from_url(path) or path] += count
    return fetches


def _revisits_due_now(redis_client: redis.Redis) -> int:
    """Bring the waiting revisits forward to now, as if their week had passed; how many."""
    waiting: Any = redis_client.zrange(revisit_keys("maps")[0], 0, -1)
    redis_client.zadd(revisit_keys("maps")[0], {fp: time.time() for fp in waiting})
    return len(waiting)


def test_a_place_url_is_fingerprinted_by_its_host_and_feature_id() -> None:
    place = PLACES.search("shop near 01002")[0]
    other = PLACES.search("shop near 01002")[1]
    host = "https://www.google.com"
    links = [place.path, *(place.link(query) for query in QUERIES)]
    ours, scrapys = PlaceFingerprinter(), RequestFingerprinter()
    assert len({ours.fingerprint(Request(host + link)) for link in links}) == 1
    assert len({scrapys.fingerprint(Request(host + link)) for link in links}) == len(links)
    same = ours.fingerprint(Request(host + place.path))
    assert ours.fingerprint(Request(host + other.path)) != same
    assert ours.fingerprint(Request("https://maps.example" + place.path)) != same
    for url in (f"{host}/maps/search/shop+near+01002?hl=en", f"{host}/maps/place/Shop/@1,2,3z"):
        assert ours.fingerprint(Request(url)) == scrapys.fingerprint(Request(url))


@pytest.mark.integration
@needs_chromium
def test_a_place_listed_by_several_searches_is_fetched_and_stored_once(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    sandbox.admin("config", {"maps_overlap": True})
    listed = sandbox.admin("maps/searches")
    listing = {query: set(listed[query]) for query in QUERIES}
    places = set().union(*listing.values())
    assert sum(map(len, listing.values())) > len(places) + 10, "the searches overlap"
    for query in QUERIES:
        redis_client.lpush("maps:start_urls", json.dumps({"query": query}))
    settings = {"MAPS_BASE_URL": sandbox.url, "RECRAWL_POLL_INTERVAL": 0.05}
    result = crawl("maps", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    assert _place_fetches(sandbox) == dict.fromkeys(places, 1)
    docs = list(crawl.mongo.db.places.find({}, {"_id": 0}))
    assert sorted(doc["place_id"] for doc in docs) == sorted(places)
    for doc in docs:
        place = PLACES.by_id[doc["place_id"]]
        # Found first by the search whose link was fetched, one that lists it.
        assert doc["place_id"] in listing[doc["query"]]
        assert doc["url"] == f"{sandbox.url}{place.link(doc['query'])}"
        assert_place_fields(doc, place)
    stats = _log_stats(result.stderr)
    assert stats["maps/searches"] == len(QUERIES)
    assert stats["maps/places"] == len(places)

    # One revisit waits per place; when due, each place page is fetched once more.
    assert _revisits_due_now(redis_client) == len(places)
    result = crawl("maps", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _place_fetches(sandbox) == dict.fromkeys(places, 2)
    assert crawl.mongo.db.places.count_documents({}) == len(places)


@pytest.mark.integration
@needs_chromium
def test_a_revisit_written_under_a_whole_url_fingerprint_goes_on_under_the_place(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """A place's revisit written before the fingerprint was the place's (Scrapy's, of its
    link) is fetched when due, and its place then waits under the place's fingerprint alone:
    not under both, which would have it revisited twice as often, for ever."""
    place = PLACES.search("shop near 01003")[0]
    url = sandbox.url + place.link("shop near 01003")
    record = {
        "url": url,
        "callback": "parse_place",
        "cb_kwargs": {"query": "shop near 01003"},
        "meta": {
            "recrawl": {"interval": 86_400.0, "hash": "x", "priority": 0},
            SENT_BACK_META: url,
        },
    }
    before = RequestFingerprinter().fingerprint(Request(url))[:16].hex()
    RevisitStore(redis_client, "maps").add([Revisit(before, time.time(), json.dumps(record))])
    settings = {"MAPS_BASE_URL": sandbox.url, "RECRAWL_POLL_INTERVAL": 0.05}
    result = crawl("maps", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _place_fetches(sandbox) == {place.place_id: 1}
    now = PlaceFingerprinter().fingerprint(Request(url))[:16].hex()
    waiting: Any = redis_client.zrange(revisit_keys("maps")[0], 0, -1, withscores=True)
    assert [(member.decode(), score > time.time() + 3600) for member, score in waiting] == [
        (now, True)
    ]
    assert redis_client.hkeys(revisit_keys("maps")[1]) == [now.encode()]
