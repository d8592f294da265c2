"""``scrapy fleet plan``: workers needed by a deadline from the pace, capped by the sites'
allowed rates, with the arithmetic shown and a warning when the deadline cannot be met."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import replace

import pytest
import redis
from scrapy.settings import Settings

from crawler import settings as project_settings
from crawler.fleet.plan import explain, parse_duration, plan
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.leases import ACK
from crawler.frontier.pacing import fleet_pacing
from crawler.frontier.queue import Frontier, Pending
from crawler.keys import FrontierKeys
from crawler.observability.demand import Demand, HostDemand
from crawler.observability.sizing import Sizing
from crawler.recrawl.store import Revisit, RevisitStore
from devtools.services import free_port
from tests.harness import Crawl, Sandbox, scrapy


def _sizing(hosts: tuple[HostDemand, ...], queued: int, pace: float = 10.0) -> Sizing:
    demand = Demand(queued, sum(h.count for h in hosts), hosts)
    return Sizing(0.0, 0.0, pace, True, queued, 1, demand=demand)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("4h", 14400.0), ("90m", 5400.0), ("1h30m", 5400.0), ("3600s", 3600.0), ("60", 60.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "4d", "soon", "0h"])
def test_durations_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|future"):
        parse_duration(text)


def test_unthrottled_work_takes_as_many_workers_as_the_pace_asks() -> None:
    hosts = tuple(HostDemand(f"h{n}", 10) for n in range(100))  # 1,000 in the sample
    chosen = plan(72_000, 3600, _sizing(hosts, 72_000))
    assert (chosen.workers, chosen.by_pace, chosen.reachable) == (2, 2, True)
    assert chosen.finish == pytest.approx(3600)
    assert "by pace     ceil(20.00 / 10.00) = 2 workers" in explain(chosen)


def test_a_politeness_bound_crawl_gets_one_worker_and_a_warning() -> None:
    hosts = tuple(HostDemand(f"h{n}", 200, rate=1.0, spare=0) for n in range(5))
    chosen = plan(100_000, 4 * 3600, _sizing(hosts, 100_000))
    assert chosen.ceiling == pytest.approx(5.0)
    assert chosen.by_pace == 1  # 6.94 pages/s at 10 per worker-second
    assert chosen.workers == 1
    assert not chosen.reachable
    assert chosen.finish == pytest.approx(20_000)
    lines = explain(chosen)
    assert any(line.startswith("WARNING     the deadline is unreachable") for line in lines)


def test_the_ceiling_caps_the_workers_the_pace_would_ask() -> None:
    hosts = tuple(HostDemand(f"h{n}", 100, rate=2.0, spare=1) for n in range(10))  # 20/s
    chosen = plan(1_000_000, 3600, _sizing(hosts, 1_000_000, pace=5.0), max_workers=8)
    assert (chosen.by_pace, chosen.needed, chosen.workers, chosen.capped) == (56, 4, 4, False)
    assert not any("cannot be met" in line for line in explain(chosen))


def test_the_most_workers_allowed_cap_the_plan_and_say_what_the_deadline_needs() -> None:
    """1,000,000 pages in a minute at 10 pages per worker-second need 1,667 workers: with at
    most 8 the plan gives 8, and says the deadline cannot be met with them."""
    hosts = tuple(HostDemand(f"h{n}", 10) for n in range(100))
    chosen = plan(1_000_000, 60, _sizing(hosts, 1_000_000), max_workers=8)
    assert (chosen.by_pace, chosen.needed, chosen.workers) == (1667, 1667, 8)
    assert chosen.capped
    assert not chosen.reachable
    assert chosen.finish == pytest.approx(1_000_000 / 80)
    warnings = [line for line in explain(chosen) if line.startswith("WARNING")]
    assert warnings == [
        "WARNING     the deadline cannot be met with 8 workers (AUTOSCALE_MAX_WORKERS, --max): "
        "it needs 1667; 1,000,000 pages take 3.47 h with 8"
    ]
    assert json.loads(json.dumps(chosen.to_json()))["workers"] == 8


def _fleet(crawl: Crawl, *args: str) -> subprocess.CompletedProcess[str]:
    return scrapy("fleet", *args, env=crawl.env())


def test_scrapy_fleet_plan(crawl: Crawl, redis_client: redis.Redis) -> None:
    homes = [f"http://site{n}.example/" for n in range(5)]
    redis_client.lpush("links:start_urls", *homes)
    polite = ["-s", "POLITENESS_RATE=1"]
    result = _fleet(crawl, "plan", "links", "--deadline", "4h", "--pages", "100000", *polite)
    assert result.returncode == 0, result.stderr
    assert "ceiling     5.00 requests/s the sites allow" in result.stdout
    assert "workers     1" in result.stdout
    assert "WARNING     the deadline is unreachable" in result.stdout
    unlimited = ["-s", "POLITENESS_RATE=0"]
    result = _fleet(crawl, "plan", "links", "--deadline", "1h", "--pages", "72000", *unlimited)
    assert "workers     2" in result.stdout
    # At the project's default rate (0.5/s), 5 hosts allow 2.5 requests/s: one worker.
    result = _fleet(crawl, "plan", "links", "--deadline", "1h", "--pages", "72000", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["workers"] == 1
    redis_client.delete("links:start_urls")
    result = _fleet(crawl, "plan", "links", "--deadline", "1h")
    assert result.returncode != 0
    assert "no work left and no revisit due: give --pages N" in result.stderr
    # Items a dead worker spilled wait for a worker on its machine: said, not "no work" alone.
    record = json.dumps({"items": 30, "at": 1.0})
    redis_client.hset("{links}:spilled", json.dumps(["w1", "/var/spill/links-1-a.jsonl"]), record)
    result = _fleet(crawl, "plan", "links", "--deadline", "1h")
    assert result.returncode != 0
    assert "no revisit due; 1 spill file holds items for a worker on its machine" in result.stderr


def _push(client: redis.Redis, key: str, entries: list[str]) -> None:
    pipe = client.pipeline(transaction=False)
    for at in range(0, len(entries), 10_000):
        pipe.lpush(key, *entries[at : at + 10_000])
    pipe.execute()


def test_a_plan_of_start_entries_alone_is_bound_by_the_hosts_they_name(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """Nothing read yet: 100,000 user names the profiles spider turns into pages of its one
    API host, at 0.5 requests/s, take 200,000 s whatever the workers; bare hosts of links count
    for their hosts; the plan says its bound comes from a sample of the start entries, and how
    many of them name no host it can tell (a batch of domains)."""
    _push(redis_client, "profiles:start_urls", [f"user.{n}" for n in range(100_000)])
    polite = ["-s", "POLITENESS_RATE=0.5"]
    result = _fleet(crawl, "plan", "profiles", "--deadline", "4h", *polite)
    assert result.returncode == 0, result.stderr
    assert "ceiling     0.50 requests/s the sites allow" in result.stdout
    assert "finish      200,000 s (55.56 h)" in result.stdout
    assert (
        "sampled     200 of the 100,000 start entries waiting, 1 host (nothing queued yet: the "
        "ceiling is theirs alone)"
    ) in result.stdout
    assert "55.56 h; more workers would not go faster" in result.stdout
    # What the autoscaler and /metrics read: one worker for the one host (before: 8, at 83/s).
    status = scrapy("status", "profiles", "--json", *polite, env=crawl.env())
    sizing = json.loads(status.stdout)["spiders"]["profiles"]["sizing"]
    assert (sizing["ceiling_per_second"], sizing["workers_wanted"]) == (0.5, 1), sizing
    hosts = [f"site{n % 4}.example/page{n}" for n in range(1_000)]
    redis_client.lpush("links:start_urls", *hosts)
    several = _fleet(crawl, "plan", "links", "--deadline", "1h", "--pages", "72000", "--json")
    assert several.returncode == 0, several.stderr
    planned = json.loads(several.stdout)
    assert (planned["ceiling"], planned["finish"]) == (2.0, 36_000)
    assert planned["ceiling_from"] == "start entries"
    assert planned["starts"] == {
        "waiting": 1_000, "sampled": 200, "hosts": 4, "unknown": 0, "only": True,
    }  # fmt: skip
    redis_client.lpush("domains:start_urls", json.dumps({"domains": ["a.example"]}), "b.example")
    mixed = _fleet(crawl, "plan", "domains", "--deadline", "1h", "--pages", "100")
    assert (
        "unknown     1 of them name no host the plan can tell without the spider: counted as "
        "work without a rate"
    ) in mixed.stdout


def _stopped_midway(
    client: redis.Redis, requests: int, horizon: float, hosts: tuple[str, ...] = ("slow.example",)
) -> dict[str, int]:
    """A links crawl of ``hosts`` at the default 0.5 requests/s, ``requests`` each, stopped
    midway: its pop (the fleet's pacing) gave the hosts' next turns (``horizon`` seconds of
    them) in the delayed set and left the rest queued; the requests it sent were done. Its
    sizes."""
    frontier = Frontier(client, FrontierKeys("links", "links:start_urls"), DupefilterConfig("none"))
    urls = [f"http://{host}/p/{n}" for n in range(requests) for host in hosts]
    records = [f'{{"u":"{url}","c":"parse"}}' for url in urls]
    frontier.schedule([Pending(r, hashlib.sha1(r.encode()).digest()[:8]) for r in records])
    settings = Settings()
    settings.setmodule(project_settings)
    pacing = fleet_pacing(settings, 60)
    assert pacing is not None
    popped = frontier.pop(len(urls), 60, "w1", replace(pacing, horizon=horizon))
    frontier.settle([(ACK, lease_id, "") for lease_id, _ in popped.leased], "w1", 60)
    return frontier.sizes()


@pytest.mark.parametrize(("requests", "horizon"), [(297, 60), (190, 350)])
def test_work_waiting_for_its_hosts_turns_finishes_at_their_rate_whatever_the_deadline(
    crawl: Crawl, redis_client: redis.Redis, requests: int, horizon: float
) -> None:
    """Most of a polite crawl waits in the delayed set for its host's turns: it is that host's
    work. At 0.5 requests/s the pages take pages / 0.5 s for any deadline (before, the ceiling
    counted the queued requests only, so every deadline was unreachable, the finish growing
    with it); the ceiling is the host's rate, or its pages spread over a longer deadline."""
    sizes = _stopped_midway(redis_client, requests, horizon)
    pages = sizes["queue"] + sizes["delayed"]
    assert sizes["delayed"] >= 25, sizes
    assert sizes["queue"] >= 5, sizes
    assert not sizes["leased"], sizes
    finish = pages / 0.5
    for deadline, seconds in (("5m", 300), ("10m", 600), ("1h", 3600), ("24h", 86400)):
        result = _fleet(crawl, "plan", "links", "--deadline", deadline, "--json")
        assert result.returncode == 0, result.stderr
        planned = json.loads(result.stdout)
        assert planned["pages"] == pages
        assert planned["finish"] == pytest.approx(finish), deadline
        assert planned["reachable"] is (seconds >= finish), deadline
        assert planned["ceiling"] == pytest.approx(min(0.5, pages / seconds)), deadline
        assert planned["workers"] == 1
    text = _fleet(crawl, "plan", "links", "--deadline", "1h").stdout
    assert f"finish      {finish:,.0f} s ({finish / 3600:.2f} h)" in text
    assert "WARNING" not in text
    late = _fleet(crawl, "plan", "links", "--deadline", "5m").stdout
    assert f"{pages:,} pages take at least {finish / 3600:.2f} h" in late
    # What the autoscaler and /metrics read: the host's rate, one worker for all its work.
    status = scrapy("status", "links", "--json", env=crawl.env())
    sizing = json.loads(status.stdout)["spiders"]["links"]["sizing"]
    assert (sizing["ceiling_per_second"], sizing["work_left"]) == (0.5, pages), sizing
    assert (sizing["ready"], sizing["workers_wanted"]) == (0, 1), sizing


def test_work_all_delayed_is_sized_from_a_sample_of_the_delayed_set(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """Nothing queued, all the work of two hosts waiting for their turns: 20 delayed requests
    read stand for all of them, each host's half at its 0.5 requests/s (before, nothing queued
    gave no ceiling at all, and a finish at the workers' pace, 10 times too soon)."""
    sizes = _stopped_midway(redis_client, 100, 350, hosts=("a.example", "b.example"))
    assert (sizes["queue"], sizes["leased"]) == (0, 0), sizes
    pages, sample = sizes["delayed"], ["-s", "AUTOSCALE_SAMPLE=20"]
    result = _fleet(crawl, "plan", "links", "--deadline", "1h", "--json", *sample)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    assert planned["pages"] == pages
    assert planned["finish"] == pytest.approx(pages / 2 / 0.5, rel=0.1)
    assert (planned["ceiling_from"], planned["workers"], planned["reachable"]) == ("queue", 1, True)
    status = scrapy("status", "links", "--json", *sample, env=crawl.env())
    sizing = json.loads(status.stdout)["spiders"]["links"]["sizing"]
    assert (sizing["ceiling_per_second"], sizing["ready"]) == (1.0, 0), sizing


def _revisits(client: redis.Redis, spider: str, due: float, *names: str) -> None:
    record = '{{"u": "https://site.example/{}", "c": "parse"}}'
    revisits = [Revisit(name * 16, due, record.format(name)) for name in names]
    RevisitStore(client, spider).add(revisits)


def test_the_plan_counts_due_revisits_as_the_autoscaler_does(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """A spider scaled to zero with revisits due: the autoscaler wants a worker for them, and
    the plan counts them as pages (and says so), not "no work left"; a revisit due later is
    no page yet, and --pages stays the operator's count."""
    _revisits(redis_client, "profiles", time.time() - 5, "aa", "bb", "cc")
    _revisits(redis_client, "profiles", time.time() + 3600, "dd")
    wanted = json.loads(scrapy("status", "profiles", "--json", env=crawl.env()).stdout)
    assert wanted["spiders"]["profiles"]["sizing"]["workers_wanted"] == 1
    due = _fleet(crawl, "plan", "profiles", "--deadline", "1h", "--json")
    assert due.returncode == 0, due.stderr
    assert {key: json.loads(due.stdout)[key] for key in ("pages", "revisits_due", "workers")} == {
        "pages": 3, "revisits_due": 3, "workers": 1,
    }  # fmt: skip
    redis_client.lpush("profiles:start_urls", json.dumps({"unique_id": "u1"}))
    both = _fleet(crawl, "plan", "profiles", "--deadline", "1h")
    assert both.returncode == 0, both.stderr
    assert "pages       4 (1 in the frontier, 3 revisits due)" in both.stdout
    given = _fleet(crawl, "plan", "profiles", "--deadline", "1h", "--pages", "10", "--json")
    assert (json.loads(given.stdout)["pages"], json.loads(given.stdout)["revisits_due"]) == (10, 0)


@pytest.mark.integration
def test_a_plan_without_a_measured_pace_calibrates_with_one_worker(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """With its answers 0.1 s late and 2 at once, the worker would take 20 s for the work: its
    pace is measured (in a few seconds) well before the work runs out."""
    sandbox.admin("config", {"latency_ms": 100})
    users = [f"missing.cal.{n}" for n in range(400)]
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in users))
    settings = {"STATS_PUBLISH_INTERVAL": 1, "CONCURRENT_REQUESTS": 2}
    worker = crawl.command("profiles", settings=settings)
    pairs = worker[worker.index("profiles") + 1 :]
    result = _fleet(crawl, "plan", "profiles", "--deadline", "1h", "--calibrate", "40", *pairs)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no pace measured: one worker crawls up to 40 s" in result.stderr
    assert "pages per worker-second (measured)" in result.stdout
    # The worker told to go lost nothing: what it stored is stored once, the rest still queued.
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert len(stored) == len(set(stored)) > 0
    assert not redis_client.zcard("{profiles}:leases")
    assert not redis_client.zcard("{profiles:start_urls}:leases")
    left = int(redis_client.llen("profiles:start_urls")) + len(stored)
    assert left <= len(users) <= left + _queued(redis_client)


def _queued(client: redis.Redis) -> int:
    return sum(int(client.llen(key)) for key in client.keys("{profiles}:queue:*"))


def test_bad_autoscale_options_are_usage_errors(crawl: Crawl) -> None:
    result = _fleet(crawl, "autoscale", "profiles", "--local", "--once", "--min", "5", "--max", "2")
    assert result.returncode == 2
    assert "AUTOSCALE_MIN_WORKERS (5) must not exceed AUTOSCALE_MAX_WORKERS (2)" in result.stderr
    result = _fleet(crawl, "plan", "profiles", "--deadline", "soon", "--pages", "10")
    assert result.returncode == 2
    assert "--deadline: not a duration: 'soon'" in result.stderr
    result = _fleet(crawl, "plan", "profiles", "--deadline", "1h", "--pages", "0")
    assert result.returncode == 2
    assert "--pages must be at least 1, got 0" in result.stderr


def test_scrapy_fleet_with_redis_away_says_so_in_one_line() -> None:
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    result = scrapy("fleet", "plan", "profiles", "--deadline", "1h", "--pages", "100", env=env)
    assert result.returncode == 1
    assert "is unreachable" in result.stderr
    assert "Traceback" not in result.stderr
