"""The links spider crawling the sandbox's generated web of many hosts (sandbox/web.py), as
users run it: `scrapy crawl links` processes against real Redis, MongoDB and the sandbox,
compared with the sandbox's ground truth and its per-host request counts."""

from __future__ import annotations

import itertools
import json
import re
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import redis

from crawler.bans.breaker import ROBOTS_UNAVAILABLE
from crawler.frontier.codec import expand
from crawler.links.ledger import HostLedger
from tests.harness import MONGO_PAUSE, Crawl, Mongo, Sandbox, poll, scrapy

pytestmark = pytest.mark.integration

RESOLVER = {
    "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
    "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
}


@pytest.fixture
def web(sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.admin("web", {})  # the default web again


def build_web(sandbox: Sandbox, **config: Any) -> dict[str, Any]:
    sandbox.admin("web", config)
    report: dict[str, Any] = sandbox.admin("web")
    return report


def home(sandbox: Sandbox, host: str) -> str:
    return f"http://{host}:{urlsplit(sandbox.url).port}/"


def stored(crawl: Crawl) -> dict[tuple[str, str], dict[str, Any]]:
    """The stored pages by (host, path); no two of them share one."""
    docs = list(crawl.mongo.db.pages.find({}, {"_id": 0}))
    pages = {(str(urlsplit(doc["url"]).hostname), urlsplit(doc["url"]).path): doc for doc in docs}
    assert len(pages) == len(docs), "a page was stored under two URLs"
    return pages


def truth(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(host, path) for host in report["hosts"] for path in report["truth"][host]}


def requested(report: dict[str, Any], predicate: Any) -> list[tuple[str, str, int]]:
    return [
        (host, path, count)
        for host, paths in report["counts"].items()
        for path, count in paths.items()
        if predicate(path)
    ]


def links_settings(**extra: Any) -> dict[str, Any]:
    return {**RESOLVER, "LINKS_DEFAULT_SCHEME": "http", **extra}


def test_every_allowed_page_stored_once_and_nothing_forbidden_requested(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    report = build_web(web, sites=20, pages=6)
    hosts = report["hosts"]
    urls = ",".join(home(web, host) for host in hosts)
    result = crawl("links", "-a", f"urls={urls}", settings=links_settings())
    assert result.returncode == 0, result.stderr[-3000:]

    pages = stored(crawl)
    assert {key for key in pages if not key[1].startswith(report["trap"])} == truth(report)
    report = web.admin("web")
    counts = report["counts"]
    for host in hosts:
        assert counts[host]["/robots.txt"] == 1, host
        for path in report["truth"][host]:
            # /p/2 is also reached through the /old redirect: still fetched once.
            assert counts[host][path] >= 1, (host, path)
    assert_each_path_asked_once(counts, result.stderr, pages=pages)
    assert not requested(report, lambda path: path.startswith(report["disallowed"]))
    assert not requested(report, lambda path: path.endswith(".pdf") or path.startswith("/a/a"))
    calendar = requested(report, lambda path: path.startswith(report["trap"]))
    assert 0 < len(calendar) <= len(hosts) * 5  # LINKS_MAX_DEPTH=5 from the home

    doc = pages[("site3.test", "/p/1")]
    assert doc["title"] == "Page 1 of site3"
    assert doc["language"] == "en-gb"
    assert doc["description"] == "Page 1 of site3 of site3"
    assert doc["status"] == 200
    assert doc["depth"] == 1
    assert doc["out_links"] == 4
    assert len(doc["content_hash"]) == 32
    assert doc["content_type"].startswith("text/html")
    redirected = pages[("site3.test", "/p/2")]
    assert redirected["requested_url"] in (None, home(web, "site3.test") + "old")

    key = "{links}:host:" + urlsplit(home(web, "site3.test")).netloc
    raw = cast(dict[bytes, bytes], redis_client.hgetall(key))
    stats = {name.decode(): int(value) for name, value in raw.items()}
    assert stats["pages"] == sum(host == "site3.test" for host, _ in pages)
    assert stats["errors:http_404"] == counts["site3.test"]["/missing"] == 1
    assert stats["external_links"] >= 1
    assert stats["bytes"] > 0
    assert 0 < redis_client.ttl(key) <= 7 * 24 * 3600
    summary = HostLedger(redis_client, "links", 60).summary(top=3)
    assert summary["totals"]["pages"] == len(pages)
    assert summary["totals"]["errors:http_404"] == len(hosts)
    assert len(summary["hosts"]) == 3
    assert all(counters["pages"] >= 1 for counters in summary["hosts"].values())
    fleet = cast(dict[bytes, bytes], redis_client.hgetall("{links}:stats"))
    # /download (4 MiB, application/octet-stream) was asked for, its body never downloaded.
    assert int(fleet[b"links/skipped/content_type"]) == len(hosts)
    assert int(fleet.get(b"response_received_count", 0)) < 20 * len(hosts)

    shown = status(crawl)
    assert shown["hosts"]["pages"] == len(pages)
    assert shown["hosts"]["errors:http_404"] == len(hosts)
    assert len(shown["top hosts"]) == 10
    done = scrapy("status", "links", env=crawl.env())
    assert done.returncode == 0, done.stderr
    text = done.stdout
    hosts_line = next(line for line in text.splitlines() if line.startswith("  hosts "))
    assert f"pages {len(pages)}" in hosts_line


def status(crawl: Crawl) -> dict[str, Any]:
    """The links figures of ``scrapy status links --json``."""
    done = scrapy("status", "links", "--json", env=crawl.env())
    assert done.returncode == 0, done.stderr
    out = done.stdout
    report: dict[str, Any] = json.loads(out)["spiders"]["links"]["report"]
    return report


def test_two_workers_fetch_robots_once_per_host(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox, tmp_path: Path
) -> None:
    """400 hosts, their home page each (no sitemaps), two workers: 400 robots.txt fetches.
    (A page more per host doubles what the test costs, the teardown's MongoDB drop included.)"""
    report = build_web(web, sites=400, pages=1, extras=False)
    entries = [json.dumps({"url": home(web, host), "max_depth": 0}) for host in report["hosts"]]
    redis_client.lpush("links:start_urls", *entries)
    # Start entries come 100 at a time (16 by default, each batch once the worker is idle).
    settings = links_settings(LINKS_SITEMAPS=False, START_BATCH_SIZE=100)
    started = time.monotonic()
    # Each worker logs to a file: a pipe read only after the other worker ends could fill up
    # and block its worker, which the other waits for (the fleet closes together).
    logs = [tmp_path / f"worker{n}.log" for n in range(2)]
    fetched = []
    with ExitStack() as running:
        workers = [
            running.enter_context(crawl.background("links", settings=settings, log=log))
            for log in logs
        ]
        for worker in workers:
            worker.wait(timeout=120)
            stderr = worker.log_text()
            assert worker.returncode == 0, stderr[-3000:]
            fetched += [int(n) for n in re.findall(r"'robotstxt/request_count': (\d+)", stderr)]
    print(f"400 hosts, two workers: {time.monotonic() - started:.1f} s")

    assert set(stored(crawl)) == {(host, "/") for host in report["hosts"]}
    counts = web.admin("web")["counts"]
    robots = {host: counts[host].get("/robots.txt", 0) for host in report["hosts"]}
    assert robots == dict.fromkeys(report["hosts"], 1)
    fleet = cast(dict[bytes, bytes], redis_client.hgetall("{links}:stats"))
    assert int(fleet[b"robotstxt/request_count"]) == len(report["hosts"])
    assert len(fetched) == 2, "each worker dumps its stats"
    assert min(fetched) > 0, fetched  # both workers fetched some


def test_scope_any_spreads_over_hosts_and_traps_stay_bounded(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    report = build_web(web, sites=8, pages=4)
    entry = {"url": home(web, "site0.test"), "scope": "any", "max_depth": 4}
    redis_client.lpush("links:start_urls", json.dumps(entry))
    # site0.test:1 refuses: the circuit breaker blocks that port briefly, not for its default
    # minute (the robots.txt, home and sitemap requests each a step when they fail apart).
    settings = links_settings(LINKS_MAX_CALENDAR_HOPS=3, RETRY_TIMES=0, HOST_BLOCK_START=0.2)
    result = crawl("links", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    pages = stored(crawl)
    content = {key for key in pages if not key[1].startswith(report["trap"])}
    assert content == truth(report)
    months = sorted(key for key in pages if key[1].startswith(report["trap"]))
    assert months == [(host, f"/cal/2024/0{m}") for host in report["hosts"] for m in (1, 2, 3)]
    assert pages[("site5.test", "/")]["depth"] == 1
    # site0 links to site0.test:1, where nothing listens: its robots.txt never answered, so no
    # page of it was asked for; after LINKS_ROBOTS_5XX_TRIES (4) such failures, before
    # HOST_MAX_EXCEPTIONS (5), its home page became a dead letter.
    refused = HostLedger(redis_client, "links", 60).host("site0.test:1")
    assert refused == {"backlinks": 1}
    dead = [json.loads(raw) for raw in redis_client.lrange("{links}:dead", 0, -1)]
    letters = [(expand(letter["request"])["url"], letter["failure"]["reason"]) for letter in dead]
    assert letters == [("http://site0.test:1/", ROBOTS_UNAVAILABLE)]


def test_scope_host_page_budget_and_bodies(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    build_web(web, sites=6, pages=3)
    # site0 links to every site: none of them is followed. site3 may store 3 pages only.
    budget = {"url": home(web, "site3.test"), "max_pages": 3}
    redis_client.lpush("links:start_urls", json.dumps(budget))
    settings = links_settings(LINKS_STORE_BODY=True, LINKS_BODY_MAX_BYTES=100)
    result = crawl("links", "-a", f"urls={home(web, 'site0.test')}", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    pages = stored(crawl)
    assert {host for host, _ in pages} == {"site0.test", "site3.test"}
    assert sum(host == "site3.test" for host, _ in pages) == 3
    doc = pages[("site0.test", "/p/1")]
    body = zlib.decompress(doc["body"])
    assert len(body) == 100
    assert doc["content_length"] > 100
    assert b"<title>Page 1 of site0</title>" in body


def test_bad_start_entries_are_set_aside_with_a_reason(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    build_web(web, sites=2, pages=1)
    good = home(web, "site1.test")
    entries = {
        "ftp://site1.test/": "bad_url",
        "http://user:secret@site1.test/": "credentials",
        json.dumps({"url": good, "scope": "galaxy"}): "bad_scope",
        json.dumps({"url": good, "max_depth": -1}): "bad_max_depth",
        json.dumps({"url": good, "colour": "red"}): "unknown_keys",
        json.dumps({"url": good, "max_depth": 0}): None,
    }
    redis_client.lpush("links:start_urls", *entries)
    result = crawl("links", settings=links_settings())
    assert result.returncode == 0, result.stderr[-3000:]

    invalid = [json.loads(raw) for raw in redis_client.lrange("links:start_urls:invalid", 0, -1)]
    reasons = {record["entry"]: record["reason"].split(":")[0] for record in invalid}
    assert reasons == {entry: reason for entry, reason in entries.items() if reason}
    assert set(stored(crawl)) == {("site1.test", "/")}


def test_a_site_answering_errors_costs_no_write_per_error(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    """Each error answer is counted, in batches that ride the frontier's round trips: far
    fewer batches reach Redis than errors."""
    build_web(web, sites=1, pages=1)
    gone = [home(web, "site0.test") + f"gone/{n}" for n in range(ERRORS)]
    redis_client.lpush("links:start_urls", *gone)
    result = crawl("links", settings=links_settings(LINKS_SITEMAPS=False))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = web.admin("web")["counts"]["site0.test"]
    assert sum(n for path, n in counts.items() if path.startswith("/gone/")) == ERRORS
    host = urlsplit(home(web, "site0.test")).netloc
    assert HostLedger(redis_client, "links", 60).host(host) == {"errors:http_404": ERRORS}
    batches = sum(int(redis_client.get(key) or 0) for key in redis_client.keys("{links}:ledger:*"))
    assert batches <= ERRORS // 4, batches


ERRORS = 60


def test_crawl_delay_is_kept_per_host(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    report = build_web(web, sites=3, pages=2, crawl_delay_every=2, crawl_delay=0.3)
    assert report["crawl_delays"] == {"site2.test": 0.3}
    urls = ",".join(home(web, host) for host in report["hosts"])
    settings = links_settings(LINKS_MAX_CALENDAR_HOPS=0)
    result = crawl("links", "-a", f"urls={urls}", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    times = sorted(poll(lambda: web.admin("web")["times"].get("site2.test"), what="requests"))
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(times) >= 5
    # The delay holds between requests sent; the sandbox stamps them on arrival, which a busy
    # machine (tests run in parallel) shifts by a few hundredths of a second either way: the
    # requests span the delay each, and no two come close together.
    assert times[-1] - times[0] >= (len(times) - 1) * 0.3 * 0.9, gaps
    assert min(gaps) >= 0.3 * 0.5, gaps
    undelayed = sorted(web.admin("web")["times"]["site1.test"])
    assert min(b - a for a, b in itertools.pairwise(undelayed)) < 0.3 * 0.9


def test_a_killed_worker_loses_nothing(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    report = build_web(web, sites=20, pages=6, latency_ms=40)
    redis_client.lpush("links:start_urls", *[home(web, host) for host in report["hosts"]])
    settings = links_settings(
        FRONTIER_LEASE_SECONDS=5, LINKS_ROBOTS_CLAIM_SECONDS=2, LINKS_MAX_CALENDAR_HOPS=2
    )
    with crawl.background("links", settings=settings) as victim:
        poll(lambda: crawl.mongo.db.pages.count_documents({}) >= 10, 60, "pages", MONGO_PAUSE)
        victim.kill()
    result = crawl("links", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    pages = {key for key in stored(crawl) if not key[1].startswith(report["trap"])}
    assert pages == truth(report)
    assert not requested(web.admin("web"), lambda path: path.startswith(report["disallowed"]))
    # Each host's /missing (a 404) is counted, by the worker killed or by the one after it.
    ledger = HostLedger(redis_client, "links", 60)
    for host in report["hosts"]:
        counters = ledger.host(urlsplit(home(web, host)).netloc)
        assert counters.get("errors:http_404", 0) >= 1, host


def test_a_host_cooling_down_waits_without_losing_its_robots(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    report = build_web(web, sites=2, pages=3)
    # site1.test was banned a moment ago: the fleet leaves it alone for 15 more seconds, long
    # enough for a worker started on a loaded machine to reach the host before the end (10 s
    # were not, once, in a full parallel run at a load average of 14).
    until = float(cast(list[Any], redis_client.time())[0]) + 15
    redis_client.hset("{links}:bans", "site1.test", str(until))
    urls = ",".join(home(web, host) for host in report["hosts"])
    result = crawl("links", "-a", f"urls={urls}", settings=links_settings())
    assert result.returncode == 0, result.stderr[-3000:]

    pages = {key for key in stored(crawl) if not key[1].startswith(report["trap"])}
    assert pages == truth(report)
    report = web.admin("web")
    assert report["counts"]["site1.test"]["/robots.txt"] == 1
    assert min(report["times"]["site1.test"]) >= until
    fleet = cast(dict[bytes, bytes], redis_client.hgetall("{links}:stats"))
    assert int(fleet[b"robotstxt/request_deferred"]) >= 1


def test_a_crawl_on_the_redisbloom_duplicate_filter(
    bloom_redis_url: str, mongo: Mongo, web: Sandbox
) -> None:
    """DUPEFILTER_MODE=redisbloom on a Redis with the module: every page stored and asked for
    once, and the filter reserved with the configured capacity, not the module's defaults."""
    client = redis.Redis.from_url(bloom_redis_url)
    client.flushdb()
    crawl = Crawl(bloom_redis_url, mongo, web.url)
    report = build_web(web, sites=5, pages=6)
    urls = ",".join(home(web, host) for host in report["hosts"])
    settings = links_settings(
        DUPEFILTER_MODE="redisbloom", DUPEFILTER_CAPACITY=5000, DUPEFILTER_ERROR_RATE=1e-5
    )
    result = crawl("links", "-a", f"urls={urls}", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    pages = stored(crawl)
    assert {key for key in pages if not key[1].startswith(report["trap"])} == truth(report)
    counts: dict[str, dict[str, int]] = web.admin("web")["counts"]
    # The filter lets no URL be asked twice.
    assert_each_path_asked_once(counts, result.stderr, pages=pages)
    info = cast(Any, client.bf().info("{links}:dupefilter"))
    assert info.capacity == 5000
    assert info.insertedNum >= len(pages)
    client.close()


def assert_each_path_asked_once(
    counts: dict[str, dict[str, int]],
    *logs: str,
    pages: dict[tuple[str, str], dict[str, Any]] | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> None:
    """The crawl asked each path the web saw once: its workers' per-host request counts (their
    logs' stats) are as many as the paths the web saw asked of each host (but those left out),
    but for pages found again by a shorter path (``sitemap_refetches`` of the stored ``pages``).
    The web counts a path twice only when the HTTP client resent a GET on a keep-alive
    connection that died first (Twisted's pool does, unseen by the crawl): once at most."""
    asked = {host: n for host, n in asked_per_host(*logs).items() if host not in leave_out}
    seen = {host: paths for host, paths in counts.items() if host not in leave_out}
    again = sitemap_refetches(seen, pages or {})
    twice = {(host, path): n for host, paths in seen.items() for path, n in paths.items() if n > 1}
    stats = [re.findall(r"'(?:dupefilter|links|start|politeness)/[^']*': \d+", log) for log in logs]
    # A path the web saw twice was asked twice by the crawl, or resent by its HTTP client.
    allowed = {
        host: range(len(paths), len(paths) + again[host] + 1) for host, paths in seen.items()
    }
    assert asked.keys() == allowed.keys(), (asked, allowed)
    failed = {host: n for host, n in asked.items() if n not in allowed[host]}
    assert not failed, (
        f"asked per host: {failed}, allowed: {allowed}; web saw twice: {twice}; {stats}"
    )
    assert sum(sum(paths.values()) for paths in seen.values()) - sum(asked.values()) <= 1


def sitemap_refetches(
    counts: dict[str, dict[str, int]], pages: dict[tuple[str, str], dict[str, Any]]
) -> Counter[str]:
    """Per host, the pages the web saw asked twice that the crawl stored at depth 1, the depth
    of a host's sitemap pages (docs/settings.md, LINKS_MAX_DEPTH), though links reach them
    deeper (all pages but /p/0 and /p/1, which the home links): their links found them first and
    the sitemap, a shorter path, later, so they were fetched again from there, by design."""
    again: Counter[str] = Counter()
    for host, paths in counts.items():
        for path, n in paths.items():
            page = pages.get((host, path))
            deep = path.startswith("/p/") and path not in ("/p/0", "/p/1")
            if n == 2 and deep and page is not None and page.get("depth") == 1:
                again[host] += 1
    return again


def asked_per_host(*logs: str) -> Counter[str]:
    """The crawl's own requests per host, summed over its workers' logs (their stats)."""
    asked: Counter[str] = Counter()
    for log in logs:
        for host, n in re.findall(r"'domain/([^/']+)/request_count': (\d+)", log):
            asked[host] += int(n)
    return asked


def host_stats(redis_client: redis.Redis, sandbox: Sandbox, host: str) -> dict[str, int]:
    return HostLedger(redis_client, "links", 60).host(urlsplit(home(sandbox, host)).netloc)


def test_a_slow_host_and_a_banning_host_hold_up_nobody(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    """One host answers 2 s late (the download timeout is 10 s), one bans after 3 requests:
    every other host is done before the slow one, every page the sandbox served is stored
    once, no ban answer is stored, the banned pages are dead-lettered, not lost, and each
    host's counters in Redis are what the sandbox counted."""
    report = build_web(
        web, sites=10, pages=4, slow_sites=1, slow_ms=2000, banning_sites=1, ban_after=3
    )
    (slow,), (banning,) = report["slow"], report["banning"]
    urls = ",".join(home(web, host) for host in report["hosts"])
    settings = links_settings(DOWNLOAD_TIMEOUT=10, BAN_MAX_TIMES=1, LINKS_MAX_CALENDAR_HOPS=1)
    result = crawl("links", "-a", f"urls={urls}", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    report = web.admin("web")
    pages = stored(crawl)
    assert {key for key in pages if not key[1].startswith(report["trap"])} == truth(report)
    counts = report["counts"]
    assert_each_path_asked_once(counts, result.stderr, pages=pages, leave_out=frozenset({banning}))
    assert {key: doc["status"] for key, doc in pages.items() if doc["status"] != 200} == {}
    assert not any("Too Many Requests" in str(doc.get("title")) for doc in pages.values())
    banned = set(report["bans"][banning])
    assert banned
    assert not {(banning, path) for path in banned} & pages.keys()
    dead = [json.loads(raw) for raw in redis_client.lrange("{links}:dead", 0, -1)]
    assert {urlsplit(expand(record["request"])["url"]).path for record in dead} == banned
    assert {record["failure"]["reason"] for record in dead} == {"banned:http_429"}
    times = report["times"]
    others = [t for host, ts in times.items() if host not in (slow, banning) for t in ts]
    assert max(others) < max(times[slow]), "the other hosts waited for the slow one"
    assert_host_stats_match_the_sandbox(redis_client, web, report, result.stderr)


def assert_host_stats_match_the_sandbox(
    redis_client: redis.Redis, sandbox: Sandbox, report: dict[str, Any], stderr: str
) -> None:
    """Each host's pages, bytes and HTTP errors in Redis are the HTML pages, their bytes and
    the error answers the sandbox served it; its bans are the fleet's ban count of the host."""
    ledger = HostLedger(redis_client, "links", 60)
    port = urlsplit(sandbox.url).port
    asked = asked_per_host(stderr)
    for host in report["hosts"]:
        stats = ledger.host(f"{host}:{port}")
        errors = {name: n for name, n in stats.items() if name.startswith("errors:")}
        served = report["html"].get(host, {})
        # A page the web served again to a GET the HTTP client resent (more answers than the
        # crawl's own requests) was received once.
        resent = sum(report["counts"].get(host, {}).values()) - asked.get(host, 0)
        again = served.get("pages", 0) - stats.get("pages", 0)
        assert 0 <= again <= resent, host
        if again:
            assert stats.get("bytes", 0) < served.get("bytes", 0), host
        else:
            assert stats.get("bytes", 0) == served.get("bytes", 0), host
        statuses = report["statuses"].get(host, {})
        assert errors == {f"errors:http_{code}": n for code, n in statuses.items() if code == "404"}
    fleet = cast(dict[bytes, bytes], redis_client.hgetall("{links}:stats"))
    bans = {host: sum(paths.values()) for host, paths in report["bans"].items()}
    counted = {
        name.decode().removeprefix("ban/domain/"): int(value)
        for name, value in fleet.items()
        if name.startswith(b"ban/domain/")
    }
    assert counted == bans
