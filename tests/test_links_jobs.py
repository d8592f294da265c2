"""Crawl jobs in the links spider: what a start entry's host seeds through its robots.txt (its
sitemaps and the pages they list) belongs to the entry's job, as the pages its links reach do
(crawler/links/robots.py, crawler/jobs.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from tests.harness import MONGO_PAUSE, Crawl, Sandbox, poll
from tests.test_jobs import _cancel, _status
from tests.test_links import build_web, home, links_settings
from tests.test_pause import _scrapy

pytestmark = pytest.mark.integration

# Seconds after a cancel (once its command has written to Redis) in which the site may still
# get the job's requests: the worker reads the jobs every CHECK_INTERVAL (1 s), and requests
# already sent arrive.
IN_FLIGHT = 5.0


@pytest.fixture
def web(sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.admin("web", {})  # the default web again


def _pages_by_host(crawl: Crawl) -> dict[str, dict[str, str | None]]:
    """The stored pages' jobs by host and path."""
    pages: dict[str, dict[str, str | None]] = {}
    for doc in crawl.mongo.db.pages.find({}, {"url": 1, "job": 1}):
        parts = urlsplit(doc["url"])
        pages.setdefault(str(parts.hostname), {})[parts.path] = doc.get("job")
    return pages


def test_a_sites_sitemap_pages_carry_its_job_and_a_cancel_stops_them(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox, tmp_path: Path
) -> None:
    """Job A crawls site0 and job B site1 (both list every page in a sitemap; site1's through
    an index and a gzipped urlset); A is cancelled mid-crawl: from IN_FLIGHT seconds after the
    cancel site0 gets no request, B's site is stored whole, and every stored page of each site
    carries its job, the pages only its sitemap lists too."""
    report = build_web(web, sites=2, pages=200, extras=False, latency_ms=100)
    jobs = {"site0.test": "A", "site1.test": "B"}
    entries = [json.dumps({"url": home(web, host), "job": job}) for host, job in jobs.items()]
    redis_client.lpush("links:start_urls", *entries)
    settings = links_settings(CONCURRENT_REQUESTS=2)
    log = tmp_path / "worker.log"
    with crawl.background("links", settings=settings, log=log) as worker:
        site0 = {"url": {"$regex": "^http://site0[.]test:"}}
        enough = lambda: crawl.mongo.db.pages.count_documents(site0) >= 20  # noqa: E731
        poll(enough, 60, "site0 pages", MONGO_PAUSE)
        _cancel(crawl, "links", "A")
        cancelled_at = time.time()  # once the command has written to Redis
        assert worker.wait(180) == 0, worker.log_text()[-3000:]

    pages = _pages_by_host(crawl)
    assert set(pages["site1.test"]) == set(report["truth"]["site1.test"])
    for host, job in jobs.items():
        untagged = sorted(path for path, tag in pages[host].items() if tag != job)
        assert untagged == [], f"{host}: {len(untagged)} pages not of job {job}: {untagged[:5]}"
    served = web.admin("web")
    times = served["times"]["site0.test"]
    late = [round(when - cancelled_at, 1) for when in times if when > cancelled_at + IN_FLIGHT]
    assert late == [], f"{len(late)} requests of cancelled job A reached site0 after the cancel"
    truth0 = set(report["truth"]["site0.test"])
    assert len(truth0 & set(served["counts"]["site0.test"])) < len(truth0), "A was not mid-crawl"
    a = _status(crawl, "links", "A")
    assert (a["queued"], a["delayed"], a["leased"]) == (0, 0, 0)
    b = _status(crawl, "links", "B")
    assert (b["queued"], b["delayed"], b["leased"], b["errors"]) == (0, 0, 0, 0)


def test_a_jobs_max_pages_holds_for_the_pages_its_sitemaps_list(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    """Job C given 10 pages, its entry a site of 40 pages its sitemap lists: the site gets at
    most 10 of C's requests (its robots.txt is the fleet's, no job's), the rest are dropped as
    over the budget, and the pages stored carry C."""
    report = build_web(web, sites=2, pages=40, extras=False)
    done = _scrapy(crawl, "frontier", "links", "job", "C", "max-pages", "10")
    assert done.returncode == 0, done.stderr[-3000:]
    redis_client.lpush("links:start_urls", json.dumps({"url": home(web, "site0.test"), "job": "C"}))
    result = crawl("links", settings=links_settings())
    assert result.returncode == 0, result.stderr[-3000:]

    counts = web.admin("web")["counts"]["site0.test"]
    asked = {path: count for path, count in counts.items() if path != "/robots.txt"}
    # The start request's turn that went to robots.txt counts as one of the job's sends.
    assert 9 <= sum(asked.values()) <= 10, asked
    assert asked.get("/sitemap.xml") == 1, asked
    status = _status(crawl, "links", "C")
    assert (status["sent"], status["queued"], status["delayed"]) == (10, 0, 0)
    assert status["over_budget"] > 0
    pages = _pages_by_host(crawl)
    assert set(pages) == {"site0.test"}
    assert 0 < len(pages["site0.test"]) < len(report["truth"]["site0.test"])
    assert set(pages["site0.test"].values()) == {"C"}


def test_two_jobs_of_one_start_url_each_get_the_entrys_page_budget(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    """The same site entered twice, by jobs X and Y, each entry with ``max_pages`` 6: each job
    stores its 6 pages (its own filter of repeats, its own budget); before, the two shared one
    budget, keyed by the start URL alone, and Y stored its start page only."""
    build_web(web, sites=1, pages=40, extras=False)
    url = home(web, "site0.test")
    entries = [json.dumps({"url": url, "job": job, "max_pages": 6}) for job in ("X", "Y")]
    redis_client.lpush("links:start_urls", *entries)
    result = crawl("links", settings=links_settings())
    assert result.returncode == 0, result.stderr[-3000:]
    counts = web.admin("web")["counts"]["site0.test"]
    pages = {
        path: count
        for path, count in counts.items()
        if not path.startswith(("/robots", "/sitemap"))
    }
    assert pages.get("/") == 2, pages  # each job's own start
    stored = {job: _status(crawl, "links", job)["items"] for job in ("X", "Y")}
    assert stored == {"X": 6, "Y": 6}, (stored, pages)


def test_a_second_job_on_a_site_gets_the_pages_only_its_sitemap_lists(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    """Job Y enters a site job X entered first: the site's robots.txt, fetched once for the
    fleet, seeds its sitemap for each job, so the page only the sitemap lists (``/orphan``) is
    fetched for each of them, as every page is; before, Y's crawl held what links reach."""
    report = build_web(web, sites=1, pages=30, extras=False)
    url = home(web, "site0.test")
    redis_client.lpush("links:start_urls", json.dumps({"url": url, "job": "X"}))
    first = crawl("links", settings=links_settings())
    assert first.returncode == 0, first.stderr[-3000:]
    redis_client.lpush("links:start_urls", json.dumps({"url": url, "job": "Y"}))
    second = crawl("links", settings=links_settings())
    assert second.returncode == 0, second.stderr[-3000:]
    counts = web.admin("web")["counts"]["site0.test"]
    assert counts.get("/robots.txt") == 1, counts
    pages = set(report["truth"]["site0.test"])
    assert "/orphan" in pages
    assert {path: counts.get(path) for path in pages} == dict.fromkeys(pages, 2)
