"""The links spider stores each page at its shortest link path, on a fleet whose breadth-first
order is not strict: a page first found by a long path and later by a shorter one is followed
again from the shorter one, and max_depth cuts off no page within it by the shorter path.

The site is the sandbox's ``graph.test`` (sandbox/graph.py), written here page by page: its
slow pages hold their answer until the long path has reached the pages they link, so the
long path is found first whatever the machine's load."""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from tests.harness import Crawl, Sandbox
from tests.test_links import links_settings

pytestmark = pytest.mark.integration

MAX_DEPTH = 5


def diamond(top: str) -> dict[str, dict[str, Any]]:
    """Pages under ``top`` (whose ``fast`` and ``slow`` the home links): a fast chain reaches
    ``target`` and its child ``t1`` at depth 5; ``slow`` answers once both were asked for and
    links ``target`` at depth 2, from where the chain t1..t4 goes on (t4 at 6 by the shortest
    path: beyond max_depth)."""
    return {
        f"{top}/fast": {"links": [f"{top}/f2"]},
        f"{top}/f2": {"links": [f"{top}/f3"]},
        f"{top}/f3": {"links": [f"{top}/f4"]},
        f"{top}/f4": {"links": [f"{top}/target", f"{top}/t1"]},
        f"{top}/slow": {"links": [f"{top}/target"], "after": [f"{top}/target", f"{top}/t1"]},
        f"{top}/target": {"links": [f"{top}/t1"]},
        f"{top}/t1": {"links": [f"{top}/t2"]},
        f"{top}/t2": {"links": [f"{top}/t3"]},
        f"{top}/t3": {"links": [f"{top}/t4"]},
        f"{top}/t4": {"links": [f"{top}/fast"]},
    }


def shortest_paths(pages: dict[str, dict[str, Any]], start: str = "/") -> dict[str, int]:
    """Each page's least number of links from ``start``."""
    depth = {start: 0}
    queue = deque([start])
    while queue:
        page = queue.popleft()
        for link in pages[page]["links"]:
            if link not in depth:
                depth[link] = depth[page] + 1
                queue.append(link)
    return depth


@pytest.fixture
def graph(sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.admin("graph", {})


@pytest.mark.parametrize(
    ("mode", "workers"),
    [("bloom", 1), ("bloom", 2), ("exact", 2)],
    ids=["bloom-one-worker", "bloom-two-workers", "exact-two-workers"],
)
def test_each_page_is_stored_at_its_shortest_link_path(
    crawl: Crawl,
    redis_client: redis.Redis,
    graph: Sandbox,
    tmp_path: Path,
    mode: str,
    workers: int,
) -> None:
    tops = [f"/d{n}" for n in range(3)]
    pages: dict[str, dict[str, Any]] = {"/": {"links": []}}
    for top in tops:
        pages["/"]["links"] += [f"{top}/fast", f"{top}/slow"]
        pages.update(diamond(top))
    graph.admin("graph", {"pages": pages, "hold_s": 60})
    home = f"http://graph.test:{urlsplit(graph.url).port}/"
    redis_client.lpush("links:start_urls", json.dumps({"url": home, "max_depth": MAX_DEPTH}))
    settings = links_settings(LINKS_SITEMAPS=False, DUPEFILTER_MODE=mode)
    with ExitStack() as running:
        started = [
            running.enter_context(
                crawl.background("links", settings=settings, log=tmp_path / f"worker{n}.log")
            )
            for n in range(workers)
        ]
        for worker in started:
            worker.wait(timeout=180)
            assert worker.returncode == 0, worker.log_text()[-3000:]

    log = graph.admin("graph")["log"]
    assert not [entry for entry in log if entry["held_out"]], "a slow page gave up waiting"
    shortest = shortest_paths(pages)
    docs = list(crawl.mongo.db.pages.find({}, {"_id": 0, "url": 1, "depth": 1}))
    depths = {urlsplit(doc["url"]).path: doc["depth"] for doc in docs}
    assert len(depths) == len(docs)
    # Every page within max_depth by its shortest path is stored, at that depth: t2 and t3
    # only through the shorter path found last (by the long one they were beyond it).
    assert depths == {page: n for page, n in shortest.items() if n <= MAX_DEPTH}
    # What it costs: the pages first asked for by the long path are asked for again, once.
    asked = Counter(entry["path"] for entry in log if entry["path"] != "/robots.txt")
    again = {f"{top}/{name}" for top in tops for name in ("target", "t1")}
    assert asked == {page: 1 + (page in again) for page in depths}


def test_a_link_is_asked_for_with_its_query_as_the_page_wrote_it(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox, tmp_path: Path
) -> None:
    """A site may read a query's order and escapes: the request goes with the link's own (its
    tracking parameters left out), while the duplicate filter knows its page by the canonical
    URL, so two links to one page in another order fetch it once."""
    pages = {
        "/": {"links": ["/search?q=a%2Fb&page=2&utm_source=mail", "/list?b=2&a=1"]},
        "/search": {"links": ["/search?page=2&q=a%2Fb", "/list?a=1&b=2"]},
        "/list": {"links": []},
    }
    graph.admin("graph", {"pages": pages})
    home = f"http://graph.test:{urlsplit(graph.url).port}/"
    redis_client.lpush("links:start_urls", json.dumps({"url": home}))
    settings = links_settings(LINKS_SITEMAPS=False, MAX_IDLE_TIME_BEFORE_CLOSE=1)
    result = crawl("links", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    log = graph.admin("graph")["log"]
    asked = sorted((entry["path"], entry["query"]) for entry in log)
    assert asked == [
        ("/", ""),
        ("/list", "b=2&a=1"),
        ("/robots.txt", ""),
        ("/search", "q=a%2Fb&page=2"),
    ]
    urls = {doc["url"] for doc in crawl.mongo.db.pages.find({}, {"url": 1})}
    assert urls == {home, f"{home}list?a=1&b=2", f"{home}search?page=2&q=a%2Fb"}


def test_a_members_only_link_sending_to_the_login_page_does_not_stop_the_site(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox
) -> None:
    """A link to a page that sends any visitor to the site's login is that page's answer: the
    site is not cooled down for it (it was, BAN_MAX_TIMES times, each for a whole BAN_COOLDOWN,
    before the pages after it were asked for)."""
    pages: dict[str, dict[str, Any]] = {
        "/": {"links": ["/account", *(f"/p{n}" for n in range(8))]},
        "/account": {"redirect": "/login?next=/account"},
        "/login": {},
        **{f"/p{n}": {"links": ["/account"]} for n in range(8)},
    }
    log = _crawled_without_a_cooldown(crawl, redis_client, graph, pages)
    asked = {entry["path"] for entry in log}
    assert asked >= {"/", "/account", "/login", *(f"/p{n}" for n in range(8))}
    assert redis_client.llen("{links}:dead") == 0


def _crawled_without_a_cooldown(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox, pages: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The graph site made of ``pages`` crawled from its home with a 600 s ban cool-down: the
    site's log of requests, every page asked for within seconds, none a cool-down later
    (measured at the site), and no ban said."""
    graph.admin("graph", {"pages": pages})
    home = f"http://graph.test:{urlsplit(graph.url).port}/"
    redis_client.lpush("links:start_urls", home)
    settings = links_settings(LINKS_SITEMAPS=False, BAN_COOLDOWN=600, POLITENESS_RATE=10)
    result = crawl("links", settings=settings, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    log: list[dict[str, Any]] = graph.admin("graph")["log"]
    assert max(entry["came"] for entry in log) - min(entry["came"] for entry in log) < 30
    assert "Ban (" not in result.stderr
    return log


# What a whole-site crawl meets that the rules for the explore and profiles APIs took for bans:
# an empty page, an API's JSON whose status code 8 means "not allowed" there (sent as HTML, as
# many servers do), and 5 KB of prose about Incapsula that quotes its block page.
PROSE = "<p>Imperva's block page reads: Request unsuccessful. Incapsula incident ID: 1-2.</p>"
ORDINARY = {
    "/empty": {"body": ""},
    "/api/item": {"body": '{"status_code": 8, "status_msg": "no such item"}'},
    "/blog/incapsula": {
        "body": "<html><head><title>On Incapsula</title></head><body>"
        + PROSE
        + "<p>It shows when a bot is blocked; a reader may see it too.</p>" * 80
        + "</body></html>"
    },
}


def test_ordinary_pages_shaped_like_api_bans_do_not_stop_a_whole_site_crawl(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox
) -> None:
    """Each is stored as a page of its site, and the pages after them are asked for at once:
    no cool-down of the site (each was a ban, cooling the site down for BAN_COOLDOWN)."""
    pages: dict[str, dict[str, Any]] = {
        "/": {"links": [*ORDINARY, *(f"/p{n}" for n in range(4))]},
        **ORDINARY,
        **{f"/p{n}": {"links": list(ORDINARY)} for n in range(4)},
    }
    log = _crawled_without_a_cooldown(crawl, redis_client, graph, pages)
    asked = Counter(entry["path"] for entry in log if entry["path"] != "/robots.txt")
    assert asked == dict.fromkeys(pages, 1), asked
    assert not redis_client.hlen("{links}:bans")
    stored = {urlsplit(doc["url"]).path for doc in crawl.mongo.db.pages.find({}, {"url": 1})}
    assert stored == set(pages)
