"""What the work allows, read from a real Redis: ready requests, the politeness ceiling and the
workers wanted, for a politeness-bound web (5 hosts at 1 request/s) and an unthrottled one."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from urllib.request import urlopen

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from scrapy.settings import Settings
from scrapy.spiderloader import get_spider_loader

from crawler import settings as project_settings
from crawler.config.rules import SettingsError
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.leases import ACK, RELEASE
from crawler.frontier.pacing import Pacing
from crawler.frontier.queue import Frontier, Pending
from crawler.keys import FleetKeys, FrontierKeys
from crawler.observability.counters import Counters
from crawler.observability.demand import Demand, HostDemand, queue_demand, read_demand
from crawler.observability.metrics import WorkerInfo, render
from crawler.observability.publisher import FleetView, StatsPublisher
from crawler.observability.report import fleet_report
from crawler.observability.report_text import sizing_line
from crawler.observability.sizing import (
    COMMAND_LOOK,
    Sizing,
    SizingConfig,
    SizingInputs,
    leased_work,
    measured_pace,
    size,
)
from crawler.recrawl.store import Revisit, RevisitStore
from crawler.spiders.domains import DomainsSpider
from crawler.spiders.entry_hosts import entry_host_reader, url_entry_host
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.profiles import ProfilesSpider
from tests.harness import Crawl, scrapy, status_page

KEYS = FrontierKeys("sized", "sized:start_urls")
POLITE = Pacing(identity="direct", rate=1.0, burst=1.0, recovery=0.001)
CONFIG = SizingConfig(max_workers=1000, backlog_seconds=60, default_pace=10)


def _queue(
    server: redis.Redis, hosts: int, per_host: int, start: int = 0, keys: FrontierKeys = KEYS
) -> None:
    frontier = Frontier(server, keys, DupefilterConfig("none"))
    batch = []
    for n in range(start, start + per_host):
        for h in range(hosts):
            url = f"http://h{h}.example/p/{n}"
            record = json.dumps({"u": url, "c": "parse"}, separators=(",", ":"))
            batch.append(Pending(record, hashlib.sha1(url.encode()).digest()[:8]))
        if len(batch) >= 2000:
            frontier.schedule(batch)
            batch = []
    if batch:
        frontier.schedule(batch)


def _sizing(server: redis.Redis, pacing: Pacing | None, config: SizingConfig = CONFIG) -> Sizing:
    pipe = server.pipeline(transaction=False)
    queue_demand(pipe, KEYS, pacing, config.sample)
    demand = read_demand(pipe.execute(), int(server.llen(KEYS.start)), pacing)
    leased = leased_work(demand, Frontier(server, KEYS, DupefilterConfig("none")).sizes())
    return size(demand, demand.queued + demand.start + leased, None, config, leased)


def test_a_politeness_bound_web_wants_one_worker_whatever_the_queue(
    redis_client: redis.Redis,
) -> None:
    for per_host in (2, 200, 4000):  # 10, 1,000 and 20,000 requests queued on 5 hosts
        redis_client.flushdb()
        _queue(redis_client, 5, per_host)
        sizing = _sizing(redis_client, POLITE)
        assert sizing.ceiling <= 5.0 + 1e-9
        assert sizing.ceiling == pytest.approx(min(5.0, 5 * per_host / 60))
        assert sizing.ready <= 5
        assert sizing.wanted == 1, sizing
    # With every host's token taken by the pop, nothing is ready; one worker is still wanted.
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("none"))
    frontier.pop(50, 60, "w1", POLITE)
    sizing = _sizing(redis_client, POLITE)
    assert sizing.ready == 0
    assert sizing.wanted == 1


def test_an_unthrottled_web_wants_more_workers_as_its_queue_grows(
    redis_client: redis.Redis,
) -> None:
    wanted, queued = [], 0
    for per_host in (1, 10, 50):  # 400, 4,000 and 20,000 requests on 400 hosts
        _queue(redis_client, 400, per_host - queued, start=queued)
        queued = per_host
        sizing = _sizing(redis_client, None)
        assert sizing.ready == pytest.approx(400 * per_host)
        # A worker fetches 10 pages/s x 60 s of the ready work.
        assert sizing.wanted == -(-400 * per_host // 600), sizing
        wanted.append(sizing.wanted)
    assert wanted == [1, 7, 34]
    # Paced at 1 request/s per host, 400 hosts allow at most 400 requests/s: 40 workers.
    assert _sizing(redis_client, POLITE).wanted <= 40


def test_work_the_workers_hold_keeps_them_until_it_is_done(redis_client: redis.Redis) -> None:
    """A fleet at the tail of its work: the queue is empty but its workers hold what they
    leased. Stopping them would put it back in the queue and ask for workers again."""
    config = SizingConfig(max_workers=1000, backlog_seconds=1, default_pace=10)
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("none"))
    _queue(redis_client, 400, 1)
    assert _sizing(redis_client, None, config).wanted == 40
    popped = frontier.pop(400, 60, "w1")
    assert len(popped.leased) == 400
    sizing = _sizing(redis_client, None, config)
    assert (sizing.ready, sizing.leased, sizing.wanted) == (0, 400, 40)
    assert _sizing(redis_client, POLITE, config).wanted == 40  # their turns were taken
    # Half done, half given back by a worker told to go: the work left decides, as before.
    ids = [lease_id for lease_id, _ in popped.leased]
    frontier.settle([(ACK, i, "") for i in ids[:200]], "w1", 60)
    frontier.settle([(RELEASE, i, "") for i in ids[200:300]], "w1", 60)
    sizing = _sizing(redis_client, None, config)
    assert (sizing.ready, sizing.leased, sizing.wanted) == (100, 100, 20)
    frontier.settle([(ACK, i, "") for i in ids[300:]], "w1", 60)
    assert _sizing(redis_client, None, config).wanted == 10  # the 100 given back
    again = frontier.pop(100, 60, "w2").leased
    assert _sizing(redis_client, None, config).wanted == 10
    frontier.settle([(ACK, i, "") for i, _ in again], "w2", 60)
    assert _sizing(redis_client, None, config).wanted == 0


_HOSTS = st.lists(
    st.tuples(st.integers(0, 500), st.sampled_from([0.0, 0.5, 2.0]), st.integers(0, 5)),
    max_size=5,
)


def _demand(hosts: list[tuple[int, float, int]]) -> Demand:
    entries = tuple(
        HostDemand(f"h{n}", count, rate, spare if rate else -1)
        for n, (count, rate, spare) in enumerate(hosts)
    )
    queued = sum(count for count, _, _ in hosts)
    return Demand(queued, queued, entries)


@given(
    hosts=_HOSTS,
    leased=st.integers(0, 3000),
    back=st.integers(0, 3000),
    to=st.integers(0, 5),
    limits=st.tuples(st.integers(0, 4), st.integers(1, 12)).filter(lambda m: m[0] <= m[1]),
    seconds=st.sampled_from([0.1, 1.0, 60.0]),
    pace=st.sampled_from([None, 0.5, 50.0]),
)
def test_work_given_back_never_asks_for_more_workers_than_while_it_was_held(
    hosts: list[tuple[int, float, int]],
    leased: int,
    back: int,
    to: int,
    limits: tuple[int, int],
    seconds: float,
    pace: float | None,
) -> None:
    """A worker told to go gives its leased work back to the queue (to a host of the sample, or
    one outside it): the fleet wants no more workers for it than it did while it was leased, and
    more leased work never lowers the workers wanted."""
    config = SizingConfig(min_workers=limits[0], max_workers=limits[1], backlog_seconds=seconds)
    back = min(back, leased)
    before = _demand(hosts)
    work = before.queued + leased
    wanted = size(before, work, pace, config, leased).wanted
    assert limits[0] <= wanted <= limits[1]
    assert wanted >= 1 or work == 0
    assert size(before, work + 1, pace, config, leased + 1).wanted >= wanted
    # Paused, no work may go: the minimum, whatever is queued or leased.
    assert size(replace(before, paused=True), work, pace, config, leased).wanted == limits[0]
    given_back = list(hosts)
    if to < len(hosts):
        count, rate, spare = hosts[to]
        given_back[to] = (count + back, rate, spare)
    else:
        given_back.append((back, 0.0, 0))
    after = size(_demand(given_back), work, pace, config, leased - back)
    assert after.wanted <= wanted, (before, after)


def test_a_shared_look_and_the_work_held_since_count_each_request_once(
    redis_client: redis.Redis,
) -> None:
    """A worker may size from the fleet's last look, a few seconds old: requests popped since
    are in that look's queue, and are not counted again as leased."""
    config = SizingConfig(max_workers=1000, backlog_seconds=1, default_pace=10)
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("none"))
    _queue(redis_client, 400, 1)

    def wanted(fresh: float) -> int:
        pipe = redis_client.pipeline(transaction=False)
        queue_demand(pipe, KEYS, None, 1000, fresh)
        demand = read_demand(pipe.execute(), 0, None)
        return size(demand, 400, None, config, leased_work(demand, frontier.sizes())).wanted

    assert wanted(0) == 40
    assert len(frontier.pop(400, 60, "w1").leased) == 400
    assert wanted(60) == 40  # the shared look, from before the pop
    assert wanted(0) == 40  # a look now: all 400 leased


def test_turns_held_ahead_by_a_paced_fleet_ask_no_more_than_their_hosts_allow() -> None:
    """400 hosts at 1 request/s, a worker's pace 40: the sites allow 10 workers. Paced pops
    lease turns up to 10 s ahead (about 4,000 leased): they go at the hosts' rate, however short
    AUTOSCALE_BACKLOG_SECONDS, so they add at most that rate again to the ceiling."""
    hosts = tuple(HostDemand(f"h{n}", 100, 1.0, 0) for n in range(400))
    demand = Demand(40_000, 40_000, hosts)
    config = SizingConfig(max_workers=1000, backlog_seconds=1)
    sizing = size(demand, 44_000, 40.0, config, leased=4000, ahead=10.0)
    assert sizing.ceiling == pytest.approx(400)
    assert sizing.wanted == 20  # without the look-ahead: 100
    assert size(demand, 44_000, 40.0, SizingConfig(max_workers=1000), 4000, ahead=10.0).wanted == 2


def test_status_names_the_leased_work_when_there_is_some() -> None:
    sizing = Sizing(0.0, 0.0, 50.0, True, 389, 8, leased=389).to_json()
    assert sizing_line(sizing) == [
        "  sizing    8 workers wanted: 0 ready, 389 leased, ceiling 0.00 requests/s, pace 50.00 "
        "pages per worker-second (measured)"
    ]
    assert "leased" not in sizing_line({**sizing, "leased": 0})[0]
    paused = Sizing(3.0, 0.05, 10.0, False, 3, 0, paused=True).to_json()
    assert sizing_line(paused)[0].startswith(
        "  sizing    0 workers wanted (the crawl is paused): 3 ready, ceiling 0.05"
    )


def test_start_entries_count_for_their_host_and_the_limits_hold(redis_client: redis.Redis) -> None:
    redis_client.lpush(KEYS.start, *(f"http://h{n % 5}.example/{n}" for n in range(5000)))
    assert _sizing(redis_client, POLITE).wanted == 1
    assert _sizing(redis_client, None).wanted == 9
    assert _sizing(redis_client, None, SizingConfig(max_workers=4)).wanted == 4
    redis_client.delete(KEYS.start)
    assert _sizing(redis_client, None, SizingConfig(min_workers=2)).wanted == 2
    assert _sizing(redis_client, None).wanted == 0
    assert url_entry_host('{"url": "https://A.example:8080/x"}') == "a.example"
    assert url_entry_host('{"unique_id": "someone"}') == ""


@given(
    entries=st.lists(
        st.one_of(st.binary(max_size=40), st.text(max_size=40).map(str.encode)), max_size=20
    ),
    spider=st.sampled_from(["links", "profiles", "domains", None]),
)
def test_any_start_entries_are_sized_never_an_error(
    entries: list[bytes], spider: str | None
) -> None:
    """What anyone pushed at the start key (bytes that are no UTF-8 too: the spider sets them
    aside) is counted as work, named by its host or by none; one bad entry failed ``scrapy
    status``, the metrics and the autoscaler with a UnicodeDecodeError."""
    settings = Settings({"SPIDER_MODULES": project_settings.SPIDER_MODULES})
    host_of = None
    if spider is not None:
        host_of = entry_host_reader(get_spider_loader(settings).load(spider), settings)
    demand = read_demand([[b"0"] * 5, entries, 0], len(entries), None, host_of)
    assert sum(host.count for host in demand.start_hosts) == len(entries)


def test_status_sizes_each_spider_as_its_workers_run(redis_client: redis.Redis) -> None:
    """The domains spider paces nothing (its own settings turn the ban middleware off): every
    request queued may go now, as its workers and ``status --serve``'s /metrics see it, not
    the project's paced hosts' few."""
    _queue(redis_client, hosts=5, per_host=400, keys=FrontierKeys("domains", "domains:start_urls"))
    settings = Settings()
    settings.setmodule(project_settings)
    settings.freeze()  # as a worker's are (its fleet page reads this report too)
    report = fleet_report(redis_client, settings, {"domains": DomainsSpider})
    assert report["spiders"]["domains"]["sizing"]["ready"] == 2000


def test_the_pace_is_pages_per_busy_worker_second() -> None:
    assert measured_pace({1: {"pages": 300, "busy_ms": 10_000}, 2: {"pages": 300}}) == 60.0
    assert measured_pace({1: {"pages": 3, "busy_ms": 500}}) is None


def test_the_minimum_may_not_exceed_the_maximum() -> None:
    settings = Settings()
    settings.setmodule(project_settings, priority="default")
    settings.setdict({"AUTOSCALE_MIN_WORKERS": 5, "AUTOSCALE_MAX_WORKERS": 2})
    with pytest.raises(SettingsError, match="AUTOSCALE_MIN_WORKERS"):
        SizingConfig.from_settings(settings)


def test_status_json_shows_the_sizing(crawl: Crawl, redis_client: redis.Redis) -> None:
    entries = [json.dumps({"unique_id": f"u{n}"}) for n in range(3)]
    redis_client.lpush("profiles:start_urls", *entries)
    result = scrapy("status", "profiles", "--json", env=crawl.env())
    assert result.returncode == 0, result.stderr[-3000:]
    sizing = json.loads(result.stdout)["spiders"]["profiles"]["sizing"]
    assert sizing["workers_wanted"] == 1
    assert sizing["work_left"] == 3
    assert sizing["pace_measured"] is False
    text = scrapy("status", "profiles", env=crawl.env())
    assert (
        "  sizing    1 workers wanted: 3 ready, ceiling 0.05 requests/s, pace 10.00" in text.stdout
    )


def test_metrics_show_the_sizing_gauges() -> None:
    sizing = Sizing(ready=12.0, ceiling=5.0, pace=40.0, measured=True, work=3000, wanted=1)
    fleet = FleetView(0.0, {"queue": 3000}, None, sizing=sizing)
    info = WorkerInfo("links", "w1", "host", 1, 0.0)
    page = render(info, Counters.from_stats({}), fleet)
    assert 'crawler_queue_ready{spider="links"} 12.0' in page
    assert 'crawler_politeness_ceiling{spider="links"} 5.0' in page
    assert 'crawler_worker_pace{spider="links"} 40.0' in page
    assert 'crawler_workers_wanted{spider="links"} 1.0' in page


def test_status_serve_shows_every_spiders_sizing_at_metrics(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """What KEDA's trigger reads when a spider has no worker to serve its own gauges."""
    entries = [json.dumps({"unique_id": f"u{n}"}) for n in range(3)]
    redis_client.lpush("profiles:start_urls", *entries)
    with status_page(crawl.env()) as url, urlopen(url + "metrics", timeout=30) as answer:
        text = answer.read().decode()
    assert 'crawler_workers_wanted{spider="profiles"} 1.0' in text
    assert 'crawler_workers_wanted{spider="explore"} 0.0' in text
    assert 'crawler_queue_ready{spider="profiles"} 3.0' in text


def test_the_fleet_shares_one_look_per_period(redis_client: redis.Redis) -> None:
    _queue(redis_client, 5, 2)

    def look(fresh: float) -> int:
        pipe = redis_client.pipeline(transaction=False)
        queue_demand(pipe, KEYS, POLITE, 1000, fresh)
        return read_demand(pipe.execute(), 0, POLITE).queued

    assert look(0) == 10
    _queue(redis_client, 5, 2, start=2)
    assert look(60) == 10  # the last look is younger than 60 s: it answers
    assert look(0) == 20  # a fresh look, kept for the fleet
    assert look(60) == 20
    # A command's look (its own settings) is made now and not kept: the workers' stays.
    _queue(redis_client, 5, 2, start=4)
    assert look(COMMAND_LOOK) == 30
    assert look(60) == 20


def test_scrapy_status_leaves_the_workers_shared_look_alone(redis_client: redis.Redis) -> None:
    """A worker at -s POLITENESS_RATE=20 kept the fleet's look; ``scrapy status`` (at the
    project's 0.5) looked with its own settings and kept its look in its place, so the
    workers' /metrics read a ceiling of 0.5 for the next seconds."""
    keys = FrontierKeys("profiles", "profiles:start_urls")
    pipe = redis_client.pipeline(transaction=False)
    queue_demand(pipe, keys, POLITE, 1000, 5.0)  # a worker's look, kept
    pipe.execute()
    kept = redis_client.get(keys.demand)
    assert kept is not None
    settings = Settings()
    settings.setmodule(project_settings)
    report = fleet_report(redis_client, settings, {"profiles": ProfilesSpider})
    assert "sizing" in report["spiders"]["profiles"]
    assert redis_client.get(keys.demand) == kept


def _revisit(client: redis.Redis, spider: str, name: str, due: float) -> None:
    record = json.dumps({"u": f"https://site.example/{name}", "c": "parse"})
    RevisitStore(client, spider).add([Revisit(name * 16, due, record)])


def test_a_due_revisit_wants_a_worker_and_a_later_one_none(redis_client: redis.Redis) -> None:
    """Only a running worker hands due revisits to the frontier: a fleet scaled to zero comes
    back for them (``scrapy status``, ``fleet autoscale`` and the exporter KEDA reads size it
    so), not for revisits due later, nor for a spider that does not revisit."""
    settings = Settings()
    settings.setmodule(project_settings)
    classes = {"profiles": ProfilesSpider, "explore": ExploreSpider}

    def sizings() -> dict[str, dict[str, object]]:
        report = fleet_report(redis_client, settings, classes)
        return {name: status["sizing"] for name, status in report["spiders"].items()}

    _revisit(redis_client, "profiles", "aa", time.time() + 3600)
    _revisit(redis_client, "explore", "bb", time.time() - 5)
    before = sizings()
    assert before["profiles"]["workers_wanted"] == 0
    assert before["explore"]["workers_wanted"] == 0  # explore never revisits: none moves them
    _revisit(redis_client, "profiles", "cc", time.time() - 5)
    after = sizings()["profiles"]
    assert after["workers_wanted"] == 1
    assert after["work_left"] == 0
    assert (after["revisits_due"], before["profiles"]["revisits_due"]) == (1, 0)
    assert "1 revisits due, " in sizing_line(after)[0]


def test_a_workers_gauge_wants_a_worker_for_due_revisits(redis_client: redis.Redis) -> None:
    """A worker's own crawler_workers_wanted (its publisher's look) counts them too."""
    settings = Settings()
    settings.setmodule(project_settings)
    own = settings.copy()
    ProfilesSpider.update_settings(own)
    publisher = StatsPublisher(
        redis_client,
        FleetKeys.from_settings(own, "profiles"),
        FrontierKeys("profiles", "profiles:start_urls"),
        "none",
        "w1",
        30,
        sizing=SizingInputs.from_settings(own),
    )
    _revisit(redis_client, "profiles", "aa", time.time() + 3600)
    view = publisher.publish({}, {"pid": 1})
    assert view.sizing is not None
    assert view.sizing.wanted == 0
    _revisit(redis_client, "profiles", "cc", time.time() - 5)
    view = publisher.publish({}, {"pid": 1})
    assert view.sizing is not None
    assert view.sizing.wanted == 1
    info = WorkerInfo("profiles", "w1", "host", 1, 0.0)
    page = render(info, Counters.from_stats({}), view)
    assert 'crawler_workers_wanted{spider="profiles"} 1.0' in page


def test_status_serve_wants_a_worker_for_due_revisits(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """What KEDA's trigger reads with the spider scaled to zero and a revisit due."""
    _revisit(redis_client, "profiles", "cc", time.time() - 5)
    with status_page(crawl.env()) as url, urlopen(url + "metrics", timeout=30) as answer:
        text = answer.read().decode()
    assert 'crawler_workers_wanted{spider="profiles"} 1.0' in text
