"""The fleet page and lifting cool-downs: a page people look at, in a real Chromium.

Unit tests render the page from reports (and from what a real Redis holds), read it as a
browser's parser or headless Chromium shows it, and drive cool-downs against a real Redis; the
integration test crawls a sandbox that bans, loads the page from ``scrapy status --serve`` and
from the worker's metrics port in headless Chromium while the worker waits out a cool-down, and
compares every number on it with ``scrapy status --json``; then ``scrapy frontier profiles unban``
lets the crawl finish.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

import pytest
import redis
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Browser, sync_playwright
from scrapy import Spider
from scrapy.settings import Settings

import crawler.settings as project_settings
from crawler.bans.politeness import FleetPoliteness, active_cooldowns, lift_cooldowns
from crawler.commands.unban import unban_host
from crawler.control.pause import pause_crawl
from crawler.frontier.jobs import JobBook
from crawler.frontier.pacing import RatePolicy
from crawler.keys import bans_key, failure_window_key, job_key, jobs_done_key, reasons_key
from crawler.observability.monitor import _shown_host
from crawler.observability.page import render_page
from crawler.observability.page_server import _is_loopback
from crawler.observability.rates import format_duration
from crawler.observability.report import fleet_report, masked_dead_letter
from crawler.observability.report_text import failure_text, render_text
from devtools.services import free_port
from sandbox.seed import build_dataset
from tests.harness import ROOT, Crawl, Sandbox, poll, scrapy, status_page

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"no Chromium at {CHROMIUM} (make test installs it)"
)
USERS = sorted(build_dataset().popular_authors(categories=[1, 2]))[:24]
FRONTIER = ("queue", "leased", "delayed", "dead", "start", "start_leased")


def _scrapy(crawl: Crawl, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return scrapy(*args, env=crawl.env(), timeout=timeout)


def _status(spider: str = "profiles", **status: Any) -> dict[str, Any]:
    """A spider's status as ``fleet_report`` gives it: crawling, one live worker, unless told."""
    counters = {
        "requests": 0,
        "responses": 0,
        "items": 0,
        "bans": 0,
        "dead_letters": 0,
        "bans_by_rule": {},
        "bans_by_domain": {},
        "dead_letters_by_reason": {},
    }
    return {
        "spider": spider,
        "paused": None,
        "failures": {"ratio": 0.5, "window": 200, "answers": 0, "failed": 0},
        "frontier": dict.fromkeys(FRONTIER, 0),
        "seen": {"count": None, "mode": "bloom", "approximate": True},
        "counters": counters,
        "rates": {"workers_pages_per_min": 0, "workers_items_per_min": 0, "per_minute": []},
        "eta_seconds": 0,
        "cooldowns": [],
        "dead_letters": [],
        "workers": [{"worker": "w1", "started": 900.0, "beat": 998.0}],
        **status,
    }


def _report(**status: Any) -> dict[str, Any]:
    return _fleet(_status(**status))


def _fleet(*statuses: dict[str, Any], now: float = 1000.0) -> dict[str, Any]:
    spiders = {status["spider"]: status for status in statuses}
    return {"redis": "redis://:***@h/0", "time": now, "spiders": spiders}


PAGE_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "small", "section"),
    *("div", "b", "p", "figure", "figcaption", "svg", "rect", "table", "tr", "th", "td"),
    *("span", "code", "line", "text"),
}


class _Parsed(HTMLParser):
    """The tags of a page and its text, as a browser's parser sees them: its headings, its
    tables' rows and each chart's labels too."""

    def __init__(self, page: str = "") -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.chunks: list[str] = []
        self.headings: list[str] = []  # the spiders' h2, as shown
        self.rows: list[list[str]] = []
        self.charts: list[list[str]] = []  # the <text> labels of each chart
        self._open: list[str] = []
        if page:
            self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._open.append(tag)
        if tag == "h2":
            self.headings.append("")
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
        elif tag == "svg":
            self.charts.append([])
        elif tag == "text":
            self.charts[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)
        if "h2" in self._open:
            self.headings[-1] += data
        if "td" in self._open or "th" in self._open:
            self.rows[-1][-1] += data
        if "text" in self._open:
            self.charts[-1][-1] += data

    @property
    def text(self) -> str:
        return "".join(self.chunks)


# --- the page, from reports -----------------------------------------------------------------------


text_from_outside = st.text(min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(domain=text_from_outside, why=text_from_outside, url=text_from_outside)
def test_whatever_a_site_sends_is_shown_as_text(domain: str, why: str, url: str) -> None:
    page = render_page(
        _report(
            cooldowns=[{"domain": domain, "identity": None, "until": 1100.0, "why": why}],
            dead_letters=[{"request": {"url": url}, "failure": {"reason": why, "time": 990}}],
            revisits={"due": 3, "next_hour": 4, "later": 5},
            report={"links": {"top hosts": {domain: 7}}, "note": why},
        )
    )
    parsed = _Parsed()
    parsed.feed(page)
    assert parsed.tags <= PAGE_TAGS, parsed.tags - PAGE_TAGS
    for shown in (domain, why, url):
        assert shown in parsed.text
    assert "redis://:***@h/0" in parsed.text
    assert "3 due now, 4 in the next hour, 5 later" in parsed.text  # the spider's figures too
    assert f"top hosts ({domain} 7)" in parsed.text


secret_values = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=8, max_size=20)


@settings(max_examples=60, deadline=None)
@given(secret=secret_values, other=secret_values, why=text_from_outside)
def test_secrets_in_a_dead_letters_error_text_are_masked(secret: str, other: str, why: str) -> None:
    def page_of(secret: str, other: str) -> tuple[dict[str, Any], str]:
        url = f"https://api.example/v1?api_key={secret}&q=1"
        error = (
            f"{why} Getting {url} took longer than 180.0 seconds; via http://u:{other}@proxy:8080"
        )
        letter = {"request": {"url": url}, "failure": {"reason": "x", "time": 990, "error": error}}
        shown = masked_dead_letter(letter)
        page = _Parsed()
        page.feed(render_page(_report(dead_letters=[shown])))
        return shown, page.text

    # A value the page shows anyway (a spider's name, a figure) is no leak.
    masked, without = page_of("***", "***")
    assume(not any(value in without + json.dumps(masked) for value in (secret, other)))
    shown, text = page_of(secret, other)
    assert "api_key=***" in shown["failure"]["error"]
    for leaked in (secret, other):
        assert leaked not in text
        assert leaked not in json.dumps(shown)


def test_the_page_loads_nothing_from_elsewhere_and_refreshes_itself() -> None:
    page = render_page(_report())
    assert '<meta http-equiv="refresh"' in page
    assert "src=" not in page
    assert "href=" not in page
    assert "<svg" in page


def test_crawling_and_paused_spiders_come_first_and_idle_ones_share_one_line() -> None:
    page = _Parsed(
        render_page(
            _fleet(
                _status("aardvark", workers=[]),  # never ran: all zeros
                _status(
                    "billing",
                    workers=[],
                    finish_reason="finished",
                    counters={**_status()["counters"], "requests": 1300, "responses": 1234},
                ),
                _status("crawls"),
                _status("halted", paused={"since": 900.0, "by": "ops", "reason": "db upgrade"}),
                _status("leftover", workers=[], frontier={**dict.fromkeys(FRONTIER, 0), "dead": 4}),
                _status("waits", workers=[], frontier={**dict.fromkeys(FRONTIER, 0), "queue": 7}),
            )
        )
    )
    assert page.headings == [
        "halted paused",
        "crawls crawling, 1 live worker",
        "waits work waiting, no live worker",
        "leftover stopped: dead letters or blocked hosts left",
    ]
    assert (
        "Idle, no live worker and nothing queued (2): aardvark (never ran), "
        "billing (1,234 pages, last finish: finished)"
    ) in page.text
    assert len(page.charts) == 2 * len(page.headings)  # none for the idle ones
    assert page.text.count("aardvark") == 1


def test_a_paused_crawl_says_since_when_by_whom_why_and_what_resumes_it() -> None:
    reason = "120 of the last 200 answers failed (FAILURE_PAUSE_RATIO 0.5)"
    pause = {"since": 1_790_000_000.0, "by": "failure threshold", "reason": reason}
    page = _Parsed(render_page(_report(paused=pause)))
    assert page.headings == ["profiles paused"]
    assert f"Paused since 2026-09-21 14:13:20 UTC by failure threshold ({reason})." in page.text
    assert "failed past the failure threshold" in page.text
    assert "No worker takes a new request until scrapy frontier profiles resume." in page.text


def test_the_failure_threshold_is_shown_against_the_fleets_last_answers() -> None:
    counted = {"ratio": 0.5, "window": 200, "answers": 180, "failed": 12}
    page = _Parsed(render_page(_report(failures=counted)))
    assert (
        "Failure threshold: 12 of the fleet's last 180 answers failed; the crawl pauses itself "
        "once more than 100 of the last 200 fail (FAILURE_PAUSE_RATIO 0.5)"
    ) in page.text
    failing = render_page(_report(failures={**counted, "failed": 70}))
    # Past half the limit, in red.
    assert '<p class="warn">Failure threshold: <span data-k="profiles.failures">70 of' in failing
    off = _Parsed(render_page(_report(failures={**counted, "ratio": 0})))
    assert "Failure threshold: failure threshold off (FAILURE_PAUSE_RATIO 0)" in off.text


def test_blocked_hosts_say_until_when_and_why_the_breakers_marks_first() -> None:
    cooldowns = [
        {"domain": "slow.example", "identity": None, "until": 1090.0, "why": "429 (HTTP 429)"},
        {"domain": "a.example", "identity": "bind:127.0.0.2", "until": 1600.0, "why": "akamai"},
        {
            "domain": "gone.example",
            "identity": "!host_unreachable",
            "until": 87_400.0,
            "why": "connection refused (5 in a row)",
        },
        {
            "domain": "norobots.example",
            "identity": "!robots_unavailable",
            "until": 87_400.0,
            "why": "robots.txt HTTP 503 (3 in a row)",
        },
    ]
    page = _Parsed(render_page(_report(cooldowns=cooldowns)))
    start = page.rows.index(["host", "blocked", "until", "ends", "why"])
    assert page.rows[start + 1 : start + 5] == [
        [
            "gone.example",
            "unreachable",
            "1970-01-02 00:16:40 UTC",
            "in 24h 00m",
            "connection refused (5 in a row)",
        ],
        [
            "norobots.example",
            "robots.txt unavailable",
            "1970-01-02 00:16:40 UTC",
            "in 24h 00m",
            "robots.txt HTTP 503 (3 in a row)",
        ],
        ["slow.example", "whole host", "1970-01-01 00:18:10 UTC", "in 1m 30s", "429 (HTTP 429)"],
        ["a.example", "for bind:127.0.0.2", "1970-01-01 00:26:40 UTC", "in 10m 00s", "akamai"],
    ]
    assert "Blocked hosts and cool-downs (4)" in page.text
    assert "!host_unreachable" not in page.text
    assert "scrapy frontier profiles unban HOST lifts its block and marks" in page.text


def test_charts_have_a_value_scale_and_utc_clock_times() -> None:
    now = 1_790_000_000.0  # 14:13:20 UTC
    first = int(now // 60) - 59
    history = [
        {"minute": (first + n) * 60, "pages": 42 if n == 30 else n % 7, "items": 12_345 * (n == 59)}
        for n in range(60)
    ]
    status = _status(rates={**_status()["rates"], "history": history})
    page = _Parsed(render_page(_fleet(status, now=now)))
    pages, items = page.charts
    clock = ["13:20", "13:30", "13:40", "13:50", "14:00", "14:10"]  # every 10 min, 13:15-14:13
    assert pages == ["0", "20", "40", "60", *clock, "UTC, one bar a minute", "pages/min"]
    assert items[:4] == ["0", "5k", "10k", "15k"]
    assert "13:44 UTC: 42 pages" in page.text  # a bar's title, shown on hover
    assert "pages per minute, last 60 min (total" in page.text


def test_the_page_shows_what_redis_holds(redis_client: redis.Redis, redis_url: str) -> None:
    settings = Settings()
    settings.setmodule(project_settings)
    settings.setdict({"REDIS_URL": redis_url, "FAILURE_PAUSE_WINDOW": 20})
    now = time.time()
    redis_client.rpush("{profiles}:queue:0", "r1", "r2")
    redis_client.zadd("{profiles}:queues", {"0": 0})
    # The newest 20 answers (the window) hold 7 failures; older ones beyond it do not count.
    redis_client.rpush(failure_window_key("profiles"), *("1" * 7 + "0" * 13 + "1" * 10))
    redis_client.hset(
        bans_key("profiles"),
        mapping={"gone.example|!host_unreachable": now + 3600, "slow.example": now + 60},
    )
    redis_client.hset(
        reasons_key("profiles"),
        mapping={"gone.example|!host_unreachable": "timed out (5 in a row)", "slow.example": "503"},
    )
    pause_crawl(redis_client, "shop", "ops", "db upgrade")
    number = JobBook(redis_client, "profiles").number("acme-1")
    redis_client.hset(job_key("profiles", "acme-1"), mapping={"pages": 3, "last": now - 10})
    redis_client.hset(jobs_done_key("profiles"), f"{number}:items", 2)  # the settle script's
    JobBook(redis_client, "profiles").number("acme-0")
    redis_client.hset(job_key("profiles", "acme-0"), mapping={"cancelled": now, "last": now - 20})
    spiders = {
        "never": type("Never", (Spider,), {"name": "never"}),
        "profiles": type("Profiles", (Spider,), {"name": "profiles"}),
        "shop": type(
            "Shop", (Spider,), {"name": "shop", "custom_settings": {"FAILURE_PAUSE_RATIO": 0}}
        ),
    }

    report = fleet_report(redis_client, settings, spiders, history=60)
    page = _Parsed(render_page(report))

    assert report["spiders"]["profiles"]["failures"] == {
        "ratio": 0.5,
        "window": 20,
        "answers": 20,
        "failed": 7,
    }
    assert page.headings == ["shop paused", "profiles work waiting, no live worker"]
    assert "Paused since " in page.text
    assert " UTC by ops (db upgrade)." in page.text
    assert "Failure threshold: failure threshold off (FAILURE_PAUSE_RATIO 0)" in page.text
    assert (
        "Failure threshold: 7 of the fleet's last 20 answers failed; the crawl pauses itself "
        "once more than 10 of the last 20 fail (FAILURE_PAUSE_RATIO 0.5)"
    ) in page.text
    blocked = {row[0]: row[1:] for row in page.rows if row[0].endswith(".example")}
    assert blocked["gone.example"][0] == "unreachable"
    assert blocked["gone.example"][2:] == ["in 1h 00m", "timed out (5 in a row)"]
    assert blocked["slow.example"][0] == "whole host"
    assert blocked["slow.example"][3] == "503"
    assert "Idle, no live worker and nothing queued (1): never (never ran)" in page.text
    jobs = [row for row in page.rows if row[0].startswith("acme-")]
    # The most recently active first.
    assert jobs == [["acme-1", "running", "3", "2", "0"], ["acme-0", "cancelled", "0", "0", "0"]]
    # scrapy status says it too.
    text = render_text(report)
    assert "  failures  7 of the fleet's last 20 answers failed;" in text
    assert "  job       acme-1 running: 3 pages, 2 items, 0 errors" in text


@needs_chromium
def test_chromium_shows_the_state_first_and_every_axis_label_inside_its_chart(
    chromium: Browser,
) -> None:
    now = 1_790_000_000.0
    history = [
        {"minute": (int(now // 60) - 59 + n) * 60, "pages": 1000 + 37 * n, "items": n % 5}
        for n in range(60)
    ]
    crawling = _status("crawls", rates={**_status()["rates"], "history": history})
    paused = _status("halted", paused={"since": now - 60, "by": "ops", "reason": "db upgrade"})
    cooldown = {"domain": "gone.example", "identity": "!host_unreachable", "until": now + 60}
    crawling["cooldowns"] = [{**cooldown, "why": "refused (5 in a row)"}]
    crawling["jobs"] = [{"job": "acme-1", "state": "paused", "pages": 12, "items": 10, "errors": 1}]
    html = render_page(_fleet(_status("aardvark", workers=[]), crawling, paused, now=now))
    page = chromium.new_page(viewport={"width": 1300, "height": 900})
    try:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        page.set_content(html)
        text = page.inner_text("body")
        labels: list[list[str]] = page.eval_on_selector_all(
            "#crawls svg",
            "svgs => svgs.map(s => [...s.querySelectorAll('text')].map(t => t.textContent))",
        )
        outside: list[str] = page.eval_on_selector_all(
            "svg text",
            """texts => texts.filter(t => {
                const box = t.ownerSVGElement.getBoundingClientRect();
                const r = t.getBoundingClientRect();
                return !(r.width > 0 && r.left >= box.left && r.right <= box.right
                         && r.top >= box.top && r.bottom <= box.bottom);
            }).map(t => t.textContent)""",
        )
        tops: list[float] = page.eval_on_selector_all(
            "#crawls svg", "svgs => svgs.map(s => s.getBoundingClientRect().top)"
        )
    finally:
        page.context.close()
    assert not requests
    assert text.index("halted") < text.index("crawls") < text.index("aardvark (never ran)")
    assert "Paused since 2026-09-21 14:12:20 UTC by ops (db upgrade)." in text
    assert "gone.example\tunreachable" in text
    assert "acme-1\tpaused\t12\t10\t1" in text
    assert labels[0][:4] == ["0", "1k", "2k", "3k"]  # the crawling spider's pages, 1,000-3,183
    assert "14:10" in labels[0]
    assert not outside  # every label drawn within its chart
    assert len(tops) == 2
    assert tops[0] == tops[1]  # the two charts side by side at 1300 pixels


SLOW_REDIS_PAGE = """
import json, sys, threading, time, urllib.request
from twisted.internet import reactor, threads
from crawler.observability.endpoint import listen, site
from crawler.observability.page_server import FleetPage
from tests.test_fleet_page import _report
reactor.suggestThreadPoolSize(10)  # Scrapy's REACTOR_THREADPOOL_MAXSIZE
builds, started = [], threading.Event()
def build():
    builds.append(1)
    started.set()
    time.sleep(1.5)  # a slow Redis
    return _report()
port = listen("127.0.0.1", [0], site(None, FleetPage(build))).port
codes = []
def load():
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
        codes.append(response.status)
def fire():
    loads = [threading.Thread(target=load) for _ in range(10)]
    for thread in loads:
        thread.start()
    started.wait(10)
    before = time.monotonic()
    threads.blockingCallFromThread(reactor, lambda: reactor.resolve("localhost"))
    resolve = time.monotonic() - before
    for thread in loads:
        thread.join()
    print(json.dumps({"builds": len(builds), "codes": codes, "resolve": resolve}))
    reactor.callFromThread(reactor.stop)
threading.Thread(target=fire, daemon=True).start()
reactor.run()
"""


def test_page_loads_share_one_build_and_leave_the_reactors_threads_to_the_crawl() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", SLOW_REDIS_PAGE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    shown = json.loads(ran.stdout.strip().splitlines()[-1])
    assert shown["codes"] == [200] * 10
    assert shown["builds"] == 1
    assert shown["resolve"] < 1.0  # not queued behind page builds


def test_the_seen_tile_says_when_it_is_an_estimate() -> None:
    approximate = render_page(_report(seen={"count": 1234, "mode": "bloom", "approximate": True}))
    exact = render_page(_report(seen={"count": 1234, "mode": "set", "approximate": False}))
    assert "seen (approx.)" in approximate
    assert "seen (approx.)" not in exact
    assert ">seen<" in exact


def test_the_logged_page_url_names_an_address_a_browser_here_reaches() -> None:
    shown = {
        host: _shown_host(SimpleNamespace(metrics_host=host))  # type: ignore[arg-type]
        for host in ("0.0.0.0", "::", "::1", "10.0.0.7", "localhost")
    }
    assert shown == {
        "0.0.0.0": "127.0.0.1",
        "::": "[::1]",
        "::1": "[::1]",
        "10.0.0.7": "10.0.0.7",
        "localhost": "localhost",
    }


PAGE_PAST_ITS_DEADLINE = """
import threading, time, urllib.error, urllib.request
from twisted.internet import reactor
import crawler.observability.page_server as page
from crawler.observability.endpoint import listen, site
from tests.test_fleet_page import _report
page.PAGE_DEADLINE_SECONDS = 0.3
def build():
    time.sleep(1.5)  # a slow Redis
    return _report()
port = listen("127.0.0.1", [0], site(None, page.FleetPage(build))).port
def load():
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
    except urllib.error.HTTPError as error:
        print(error.code, error.read().decode())
    reactor.callFromThread(reactor.stop)
threading.Thread(target=load, daemon=True).start()
reactor.run()
"""


def test_a_page_that_takes_too_long_says_so() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", PAGE_PAST_ITS_DEADLINE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("503 ")
    assert "took too long" in ran.stdout


def test_only_this_machine_sees_the_page_by_default() -> None:
    assert _is_loopback(SimpleNamespace(host="127.0.0.1"))
    assert _is_loopback(SimpleNamespace(host="::1"))
    assert _is_loopback(SimpleNamespace(host="::ffff:127.0.0.1"))
    assert not _is_loopback(SimpleNamespace(host="10.0.0.7"))
    assert not _is_loopback(SimpleNamespace(host="unix-socket"))


def test_the_served_page_says_redis_is_away_without_its_password_and_is_read_only(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "REDIS_URL": f"redis://:s3cret@127.0.0.1:{free_port()}/0"}
    with status_page(env) as url:
        with pytest.raises(HTTPError) as away:
            urlopen(url, timeout=30)
        assert away.value.code == 503
        page = away.value.read().decode()
        assert "Redis is unreachable" in page
        assert "s3cret" not in page
        assert '<meta http-equiv="refresh"' in page  # it keeps trying
        with pytest.raises(HTTPError) as posted:
            urlopen(url, data=b"x=1", timeout=30)
        assert posted.value.code == 405
        # /metrics serves each spider's sizing gauges (none while Redis is unreachable, and
        # says so).
        with urlopen(url + "metrics", timeout=30) as metrics:
            text = metrics.read().decode()
        assert "crawler_workers_wanted{" not in text
        assert "crawler_fleet_redis_up 0.0" in text  # never an empty answer
        assert "s3cret" not in text
        with pytest.raises(HTTPError) as elsewhere:
            urlopen(url + "elsewhere", timeout=30)
        assert elsewhere.value.code == 404


def _env_without_redis() -> dict[str, str]:
    return {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}


def _status_with_host(url: str, host: str) -> int:
    request = Request(url, headers={"Host": host})
    try:
        with urlopen(request, timeout=30) as response:
            return int(response.status)
    except HTTPError as error:
        return error.code


def test_the_served_page_follows_fleet_page_and_answers_only_its_own_name() -> None:
    with status_page(_env_without_redis(), "--host", "0.0.0.0") as served:  # FLEET_PAGE=local
        port = urlsplit(served).port
        url = f"http://127.0.0.1:{port}/"
        assert _status_with_host(url, "attacker.example") == 403
        assert _status_with_host(url, f"attacker.example:{port}") == 403
        for name in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST."):
            assert _status_with_host(url, name) == 503  # shown: Redis is away
    off = scrapy("status", "--serve", "0", "-s", "FLEET_PAGE=off", env=_env_without_redis())
    assert off.returncode != 0
    assert "FLEET_PAGE is off" in off.stderr
    typo = scrapy("status", "--serve", "0", "-s", "FLEET_PAGE=Local", env=_env_without_redis())
    assert typo.returncode != 0  # never served to any host name, as "all" would be
    assert "FLEET_PAGE" in typo.stderr
    assert "local" in typo.stderr


# --- cool-downs and unban (real Redis) ------------------------------------------------------------


def test_ended_cooldowns_are_pruned_as_new_bans_come(redis_client: redis.Redis) -> None:
    fleet = FleetPoliteness(redis_client, "pruned", RatePolicy(rate=0, burst=1), refresh=0)
    for n in range(200):
        fleet.ban(f"old{n}.example", None, 0.2, "ended soon")
    poll(lambda: not active_cooldowns(redis_client, "pruned"), timeout=10)
    for n in range(200):
        fleet.ban(f"new{n}.example", None, 600, "active")
    assert len(active_cooldowns(redis_client, "pruned")) == 200
    assert redis_client.hlen("{pruned}:bans") < 210
    assert redis_client.hlen("{pruned}:bans:why") < 210


def test_the_page_shows_the_first_rows_and_how_many_more() -> None:
    cooldowns = [
        {"domain": f"d{n}.example", "identity": None, "until": 1100.0 + n, "why": "x"}
        for n in range(120)
    ]
    by_domain = {f"d{n}.example": 1000 - n for n in range(130)}
    report = _report(cooldowns=cooldowns)
    report["spiders"]["profiles"]["counters"]["bans_by_domain"] = by_domain
    page = render_page(report)
    assert "Blocked hosts and cool-downs (120)" in page
    assert "and 70 more" in page
    assert "Bans by domain (130)" in page
    assert "and 80 more" in page
    assert "d49.example" in page
    assert "d50.example" not in page


def test_unban_finds_the_host_however_it_is_written(redis_client: redis.Redis) -> None:
    fleet = FleetPoliteness(redis_client, "idna", RatePolicy(rate=0, burst=1), refresh=0)
    fleet.ban("xn--bcher-kva.example", None, 600, "akamai (HTTP 403)")
    fleet.ban("example.com", None, 600, "429 (HTTP 429)")
    assert unban_host(" Bücher.Example. ") == "xn--bcher-kva.example"
    assert unban_host("EXAMPLE.com.") == "example.com"
    lifted = lift_cooldowns(redis_client, "idna", unban_host("BÜCHER.example."))
    assert [c.domain for c in lifted] == ["xn--bcher-kva.example"]
    assert [c.domain for c in active_cooldowns(redis_client, "idna")] == ["example.com"]


def test_a_cooldown_says_why_and_unban_lifts_it_for_every_worker(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    policy = RatePolicy(rate=0, burst=1)
    first = FleetPoliteness(redis_client, "profiles", policy, refresh=0)
    other = FleetPoliteness(redis_client, "profiles", policy, refresh=0)
    until = first.ban("a.example", None, 600, "akamai (HTTP 403)")
    first.ban("a.example", "bind:127.0.0.2", 600, "429 (HTTP 429)")
    first.ban("b.example", None, 600, "captcha (HTTP 200)")
    first.ban("a.example", None, 5, "shorter: not kept")
    assert other.cooling_until("a.example") == until

    shown = {(c.domain, c.identity): c.why for c in active_cooldowns(redis_client, "profiles")}
    assert shown == {
        ("a.example", None): "akamai (HTTP 403)",
        ("a.example", "bind:127.0.0.2"): "429 (HTTP 429)",
        ("b.example", None): "captcha (HTTP 200)",
    }

    result = _scrapy(crawl, "frontier", "profiles", "unban", "A.example", "--json")
    assert result.returncode == 0, result.stderr
    lifted = json.loads(result.stdout)["lifted"]
    assert {(c["domain"], c["identity"]) for c in lifted} == {
        ("a.example", None),
        ("a.example", "bind:127.0.0.2"),
    }
    assert other.cooling_until("a.example") == 0
    assert other.cooling_until("a.example", "bind:127.0.0.2") == 0
    assert other.cooling_until("b.example") > time.time()

    wrong = _scrapy(crawl, "frontier", "profiles", "unban")
    assert wrong.returncode != 0
    assert "unban takes one domain" in wrong.stderr


# --- the page in Chromium during a crawl ----------------------------------------------------------


@pytest.fixture
def chromium() -> Iterator[Browser]:
    """One headless Chromium for the test's page loads, each in a fresh context of its own."""
    options: dict[str, Any] = dict(project_settings.PLAYWRIGHT_LAUNCH_OPTIONS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**options)
        try:
            yield browser
        finally:
            browser.close()


def _read_page(browser: Browser, url: str, screenshot: Path) -> dict[str, str]:
    """Every ``data-k`` number of the page and its text, as Chromium shows them."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    try:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        page.goto(url)
        values: dict[str, str] = page.eval_on_selector_all(
            "[data-k]",
            "nodes => Object.fromEntries(nodes.map(n => [n.dataset.k, n.textContent]))",
        )
        values["__text__"] = page.inner_text("body")
        values["__axes__"] = json.dumps(
            page.eval_on_selector_all(
                "svg",
                "svgs => svgs.map(s => [...s.querySelectorAll('text')].map(t => t.textContent))",
            )
        )
        page.screenshot(path=str(screenshot), full_page=True)
    finally:
        page.context.close()
    assert all(request.startswith(url) for request in requests), requests
    return values


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _assert_page_matches(values: dict[str, str], status: dict[str, Any]) -> None:
    counters, frontier = status["counters"], status["frontier"]
    for name in FRONTIER:
        assert _number(values[f"profiles.frontier.{name}"]) == frontier[name], name
    assert _number(values["profiles.pages"]) == counters["responses"]
    assert _number(values["profiles.items"]) == counters["items"]
    assert _number(values["profiles.bans"]) == counters["bans"]
    assert _number(values["profiles.dead_letters"]) == counters["dead_letters"]
    for rule, count in counters["bans_by_rule"].items():
        assert _number(values[f"profiles.bans.rule.{rule}"]) == count
    for domain, count in counters["bans_by_domain"].items():
        assert _number(values[f"profiles.bans.domain.{domain}"]) == count
    assert _number(values["profiles.workers"]) == len(status["workers"])
    assert _number(values["profiles.pages_per_min"]) == status["rates"]["workers_pages_per_min"]
    assert values["profiles.eta"] == format_duration(status["eta_seconds"])
    pages = status["stats"].get("response_received_count", 0)
    assert _number(values["profiles.history.pages"]) == pages
    assert values["profiles.failures"] == failure_text(status["failures"])
    text = values["__text__"]
    assert "profiles crawling, 1 live worker" in text
    assert f"Blocked hosts and cool-downs ({len(status['cooldowns'])})" in text
    for cooldown in status["cooldowns"]:
        assert cooldown["why"] in text
    # Each chart has its value scale from 0 and UTC clock times.
    for labels in json.loads(values["__axes__"]):
        assert labels[0] == "0"
        assert "UTC, one bar a minute" in labels
        assert any(label[:2].isdigit() and label[2:3] == ":" for label in labels)
    for reason in counters["dead_letters_by_reason"]:
        assert reason in text


@pytest.fixture
def served_page(crawl: Crawl) -> Iterator[str]:
    """``scrapy status profiles --serve 0``: the page's URL; stopped with SIGINT afterwards."""
    with status_page(crawl.env(), "profiles") as url:
        assert url.startswith("http://127.0.0.1:"), url
        yield url


def _steady(crawl: Crawl) -> dict[str, Any]:
    """``scrapy status --json`` once the worker waits out its cool-down and nothing moves."""
    last: list[tuple[Any, ...]] = []

    def settled() -> dict[str, Any] | None:
        result = _scrapy(crawl, "status", "profiles", "--json")
        assert result.returncode == 0, result.stderr
        status: dict[str, Any] = json.loads(result.stdout)["spiders"]["profiles"]
        moving = (status["frontier"], status["counters"], len(status["workers"]))
        # Once the workers' own pace (over PACE_WINDOW) is 0 too, the ETA stands still.
        ready = (
            status["cooldowns"]
            and status["frontier"]["leased"] == 0
            and status["workers"]
            and status["rates"]["workers_pages_per_min"] == 0
        )
        same = bool(last) and last[-1] == moving
        last.append(moving)
        return status if ready and same else None

    return poll(settled, timeout=180, what="a crawl waiting out its cool-down", pause=1)


def _paused(client: redis.Redis) -> bool:
    """Whether the fleet has banned and every worker's heartbeat says its pace fell to 0: read
    in Redis, not with a ``scrapy status`` process a second through the PACE_WINDOW this takes."""
    if not int(client.hget("{profiles}:stats", "ban/count") or 0):
        return False
    beats = [client.hget(key, "pages_per_min") for key in client.scan_iter("{profiles}:workers:*")]
    return bool(beats) and all(beat is not None and float(beat) == 0 for beat in beats)


@needs_chromium
@pytest.mark.integration
def test_the_page_shows_what_status_shows_and_unban_lets_the_crawl_finish(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    served_page: str,
    chromium: Browser,
    tmp_path: Path,
) -> None:
    sandbox.admin(
        "config",
        {
            "rate_limit": {
                "enabled": True,
                "max_requests": 10,
                "window_seconds": 60,
                "ban_seconds": 2,
                "ban_mode": "403",
            },
            "faults": {"error_rate": 0.2, "seed": 5},
        },
    )
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    port = free_port()
    log = tmp_path / "worker.log"
    settings = {
        "CONCURRENT_REQUESTS": 2,
        "BAN_COOLDOWN": 600,
        "RETRY_TIMES": 0,
        "METRICS_PORT": port,
        "METRICS_HOST": "127.0.0.1",
        "STATS_PUBLISH_INTERVAL": 0.5,
        "PACE_WINDOW": 2,  # the pace falls to 0 two seconds after the ban, not a minute
        "MONGO_SPILL_DIR": tmp_path / "spill",
        # A 503 blocks the host for a second at most: the crawl goes on to its rate limit's ban.
        "HOST_BLOCK_START": 0.5,
        "HOST_BLOCK_MAX": 1,
    }
    with crawl.background("profiles", settings=settings, log=log) as worker:
        poll(lambda: _paused(redis_client), 180, "the worker's pace to fall to 0", pause=0.5)
        status = _steady(crawl)
        assert status["counters"]["bans"] >= 1
        assert status["counters"]["dead_letters"] >= 1
        on_worker = _read_page(chromium, f"http://127.0.0.1:{port}/", tmp_path / "worker-page.png")
        served = _read_page(chromium, served_page, tmp_path / "fleet-page.png")
        again = json.loads(_scrapy(crawl, "status", "profiles", "--json").stdout)
        assert again["spiders"]["profiles"]["counters"] == status["counters"]
        _assert_page_matches(served, status)
        _assert_page_matches(on_worker, status)

        sandbox.admin("config", {"rate_limit": {"enabled": False}, "faults": {"error_rate": 0}})
        domain = urlsplit(crawl.sandbox_url).hostname or ""
        result = _scrapy(crawl, "frontier", "profiles", "unban", domain, "--json")
        assert result.returncode == 0, result.stderr
        unbanned = json.loads(result.stdout)
        (rule,) = status["counters"]["bans_by_rule"]  # the sandbox's 403 page: one rule
        assert [c["why"] for c in unbanned["lifted"]] == [f"{rule} (HTTP 403)"]
        assert unbanned["made_due"] >= 1
        assert worker.wait(timeout=120) == 0, log.read_text()[-3000:]
    stored = {doc["unique_id"] for doc in crawl.mongo.db.profiles.find()}
    dead = status["counters"]["dead_letters"]
    assert len(stored) + dead >= len(USERS)
    after = _read_page(chromium, served_page, tmp_path / "fleet-page-after.png")
    assert "Blocked hosts and cool-downs (0): none" in after["__text__"]
    assert (tmp_path / "fleet-page.png").stat().st_size > 10_000
