"""The domains spider against the domains sandbox: a DNS server and web servers on loopback
for a seeded population of fake domains, whose ground truth each sweep must match."""

from __future__ import annotations

import base64
import itertools
import json
import random
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import hypothesis
import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from crawler.domains.summary import summarize
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys
from crawler.spiders.domains import FILE_AHEAD_BATCHES
from devtools.services import free_port
from sandbox.dns import Answer
from sandbox.domains import DomainsSandbox, SandboxThread, page_title
from sandbox.domains_population import (
    EXPECTED,
    TITLED,
    FakeDomain,
    build_population,
    fake_domain,
)
from tests.harness import ROOT, Crawl, Mongo, poll

POPULATION = 300
# The sandbox's slow domains answer after 30 s; 2 s leaves a loaded machine (the suite runs in
# parallel) time to fetch the others (1 s timed out live ones under load).
DOWNLOAD_TIMEOUT = 2.0
LOCAL = "127.0.0.1"

NO_FILTER = DupefilterConfig("none")


@pytest.fixture(scope="module")
def domains_sandbox() -> Iterator[DomainsSandbox]:
    runner = SandboxThread(DomainsSandbox(build_population(POPULATION, seed=7), slow_seconds=15))
    yield runner.start()
    runner.stop()


@pytest.fixture
def sweep(redis_url: str, redis_client: redis.Redis, mongo: Mongo) -> Crawl:
    # The web sandbox is not needed: its URL only sets the other spiders' base URLs.
    return Crawl(redis_url, mongo, "http://127.0.0.1:9")


def sweep_settings(sandbox: DomainsSandbox, **extra: Any) -> dict[str, Any]:
    return {
        "DOMAINS_NAMESERVERS": sandbox.nameserver,
        "DOMAINS_HTTP_PORT": sandbox.http_port,
        "DOMAINS_HTTPS_PORT": sandbox.https_port,
        "DOMAINS_DNS_TIMEOUT": 1.0,  # 0.3 s timed out twice in a row once on a loaded machine
        "DOMAINS_DOWNLOAD_TIMEOUT": DOWNLOAD_TIMEOUT,
        "DOMAINS_PRIVATE_ADDRESSES": True,  # the sandbox's domains are on loopback
        "LOG_LEVEL": "WARNING",
        **extra,
    }


def stored(mongo: Mongo) -> dict[str, dict[str, Any]]:
    return {document["domain"]: document for document in mongo.db.domains.find()}


def check_truth(documents: dict[str, dict[str, Any]], expected: list[FakeDomain]) -> None:
    wrong = {
        domain.name: (domain.behaviour, domain.status, domain.code, documents.get(domain.name))
        for domain in expected
        if (documents.get(domain.name) or {}).get("status") != domain.status
        or documents[domain.name]["code"] != domain.code
        or documents[domain.name]["scheme"] != domain.scheme
    }
    assert not wrong, f"{len(wrong)} misclassified, e.g. {list(wrong.items())[:3]}"
    for domain in expected:
        document = documents[domain.name]
        if domain.behaviour in TITLED:
            assert document["title"] == page_title(domain.name), domain
        if domain.scheme is not None:
            assert bool(document["truncated"]) == (domain.behaviour == "truncated"), domain


def test_sweep_classifies_every_domain_as_the_sandbox_says(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, domains_sandbox: DomainsSandbox
) -> None:
    domains = list(domains_sandbox.domains.values())
    entries = [domain.entry for domain in domains]
    # Plain entries, JSON batches (with a bad name inside), junk, and a repeated domain.
    redis_client.lpush("domains:start_urls", *entries[:50])
    for start in range(50, len(entries), 100):
        batch = {"domains": [*entries[start : start + 100], "bad name.com"]}
        redis_client.lpush("domains:start_urls", json.dumps(batch))
    redis_client.lpush("domains:start_urls", "localhost", "127.0.0.1", entries[0])

    result = sweep("domains", settings=sweep_settings(domains_sandbox))

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    assert len(documents) == len(domains)
    check_truth(documents, domains)
    assert redis_client.llen("domains:start_urls") == 0
    invalid = [json.loads(raw) for raw in redis_client.lrange("domains:start_urls:invalid", 0, -1)]
    reasons = sorted(record["reason"].split(":")[1] for record in invalid)
    assert reasons == ["bad_label"] * 3 + ["ip_address", "single_label"]
    assert {record["entry"] for record in invalid} == {"127.0.0.1", "localhost", "bad name.com"}
    # Failures are results: nothing dead-lettered, nothing left leased.
    assert redis_client.llen("{domains}:dead") == 0
    assert redis_client.zcard("{domains}:leases") == 0
    # Bounded state: no per-domain stats fields nor keys in Redis; results live in MongoDB.
    stats: dict[Any, Any] = redis_client.hgetall("{domains}:stats")
    fields = [name.decode() for name in stats]
    assert not [name for name in fields if name.startswith("domain/")]
    # Each domain was probed once, the repeated one too (the dupefilter).
    assert summarize(stats).total == len(domains)
    assert len(fields) < 200
    assert not [key for key in redis_client.scan_iter() if b".test" in key]
    # The sandbox's certificates match none of its domains: counted, not a warning a domain.
    assert int(stats[b"domains/tls/certificate_warnings"]) >= 2
    assert "Remote certificate is not valid" not in result.stderr


def test_redirects_and_fallbacks_are_described(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, domains_sandbox: DomainsSandbox
) -> None:
    by_behaviour: dict[str, FakeDomain] = {}
    for domain in domains_sandbox.domains.values():
        by_behaviour.setdefault(domain.behaviour, domain)
    redis_client.lpush("domains:start_urls", *(domain.name for domain in by_behaviour.values()))
    before = Counter(domains_sandbox.requests)

    result = sweep("domains", settings=sweep_settings(domains_sandbox))

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    asked = {host: count - before[host] for host, count in domains_sandbox.requests.items()}
    port, tls_port = domains_sandbox.http_port, domains_sandbox.https_port
    # Each answer says which address answered it.
    alive = documents[by_behaviour["alive"].name]
    assert alive["address"] == domains_sandbox.web_ip
    assert documents[by_behaviour["tls_only"].name]["address"] == domains_sandbox.address_of(
        by_behaviour["tls_only"]
    )
    # Port 80 filtered (connecting times out), HTTPS answering: HTTPS is tried after the
    # timeout, as its retry, and answers.
    filtered = documents[by_behaviour["filtered_then_tls"].name]
    assert (filtered["status"], filtered["scheme"], filtered["attempts"]) == ("alive", "https", 2)
    assert filtered["http_error"].startswith("timeout: ")
    assert filtered["title"] == page_title(filtered["domain"])
    assert asked[filtered["domain"]] == 1  # its HTTPS server
    # A redirect within the domain to a name without an address: the domain answered (its
    # answer the redirect), and where it sent the browser failed.
    shop = documents[by_behaviour["redirect_nxdomain"].name]
    assert (shop["status"], shop["code"], shop["http_status"]) == ("redirect_failed", 301, 301)
    assert (shop["scheme"], shop["address"]) == ("http", domains_sandbox.web_ip)
    assert shop["final_url"] == f"http://shop.{shop['domain']}:{port}/"
    assert shop["redirect_error"].startswith("dns_not_found: ")
    assert domains_sandbox.dns is not None
    assert domains_sandbox.dns.queries[f"shop.{shop['domain']}"] >= 1
    assert (asked[shop["domain"]], asked.get(f"shop.{shop['domain']}", 0)) == (1, 0)
    www = documents[by_behaviour["redirect_www"].name]
    assert www["final_url"] == f"http://www.{www['domain']}:{port}/"
    assert www["attempts"] == 2
    # A name under the domain is its site: followed, classed by where it lands.
    en = documents[by_behaviour["redirect_subdomain"].name]
    assert (en["status"], en["final_url"]) == ("alive", f"http://en.{en['domain']}:{port}/")
    bodis = documents[by_behaviour["parked_subdomain"].name]
    assert (bodis["status"], bodis["attempts"]) == ("parked", 2)
    assert bodis["final_url"].startswith(f"http://ww25.{bodis['domain']}:{port}/?subid1=")
    tls = documents[by_behaviour["tls_only"].name]
    assert tls["final_url"] == f"https://{tls['domain']}:{tls_port}/"
    assert tls["server"] == "sandbox-domains/1"
    offsite = documents[by_behaviour["redirect_offsite"].name]
    assert offsite["final_url"].startswith("http://moved-")
    # A page that only sends the browser on, by a script or a meta refresh: followed within
    # the domain (GoDaddy's parked / and its /lander), a redirect when it leaves.
    lander = documents[by_behaviour["script_parked"].name]
    assert (lander["status"], lander["attempts"]) == ("parked", 2)
    assert lander["final_url"] == f"http://{lander['domain']}:{port}/lander"
    away = documents[by_behaviour["script_offsite"].name]
    assert (away["status"], away["http_status"]) == ("redirect_offsite", 200)
    assert away["final_url"].startswith("http://moved-")
    slow = documents[by_behaviour["slow"].name]
    assert slow["attempts"] == 2  # one retry of a timeout
    assert slow["response_time"] >= DOWNLOAD_TIMEOUT
    for behaviour in ("nxdomain", "no_address", "refused"):
        assert documents[by_behaviour[behaviour].name]["error"]
    assert all(document["checked_at"] > 0 for document in documents.values())
    # What each scheme said: the HTTP failure is kept beside the HTTPS one.
    said = {
        behaviour: (document["http_error"] or "ok").split(":")[0]
        + " / "
        + (document["https_error"] or "-").split(":")[0]
        for behaviour, domain in by_behaviour.items()
        for document in [documents[domain.name]]
    }
    assert said["reset"] == "connection_error / refused"
    assert said["close_after_read"] == "connection_error / refused"
    assert said["ssh_banner"] == "not_http / refused"
    assert said["smtp_tls_broken"] == "not_http / tls_error"
    assert said["refused"] == "refused / refused"
    assert said["tls_broken"] == "refused / tls_error"
    assert said["reset_then_tls"] == "connection_error / -"
    assert said["alive"] == said["big_page"] == "ok / -"
    assert documents[by_behaviour["reset"].name]["error"]  # reset by peer, or lost
    loop = documents[by_behaviour["redirect_loop"].name]
    assert loop["final_url"] == f"http://{loop['domain']}:{port}/"  # back to the start
    assert loop["attempts"] == 2
    https = documents[by_behaviour["redirect_https"].name]
    assert (https["scheme"], https["final_url"]) == (
        "https",
        f"https://{https['domain']}:{tls_port}/",
    )
    bad = documents[by_behaviour["redirect_https_bad"].name]
    assert (bad["status"], bad["code"], bad["scheme"]) == ("redirect_failed", 301, "http")
    assert bad["final_url"] == f"https://{bad['domain']}:{tls_port}/"
    assert bad["redirect_error"].startswith("tls_error: ")
    assert said["redirect_https_bad"] == "ok / tls_error"
    assert said["redirect_nxdomain"] == "dns_not_found / -"
    assert said["filtered"] == said["slow"] == "timeout / refused"
    big = documents[by_behaviour["big_page"].name]
    assert (big["http_status"], big["truncated"]) == (200, False)
    truncated = documents[by_behaviour["truncated"].name]
    assert (truncated["http_status"], truncated["truncated"]) == (200, True)


@pytest.mark.parametrize(
    ("header", "encoding", "newline"),
    [
        (["rank,domain"], "utf-8", "\n"),
        ([], "utf-8-sig", "\r\n"),  # Excel's "CSV UTF-8": a byte order mark, no header
    ],
)
def test_csv_file_is_read_as_a_stream(
    sweep: Crawl,
    redis_client: redis.Redis,
    mongo: Mongo,
    domains_sandbox: DomainsSandbox,
    tmp_path: Path,
    header: list[str],
    encoding: str,
    newline: str,
) -> None:
    sample = [d for d in domains_sandbox.domains.values() if d.behaviour in ("alive", "nxdomain")]
    sample = sample[:20]
    lines = [*header, *(f"{rank},{d.entry}" for rank, d in enumerate(sample, 1)), ""]
    csv_file = tmp_path / "top.csv"
    latin = b"99,caf\xe9.example"  # a line written in Latin-1: set aside byte for byte
    csv_file.write_bytes(newline.join(lines).encode(encoding) + latin + newline.encode())

    result = sweep("domains", "-a", f"file={csv_file}", settings=sweep_settings(domains_sandbox))

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    assert len(documents) == len(sample)
    check_truth(documents, sample)
    (raw,) = redis_client.lrange("domains:start_urls:invalid", 0, -1)
    record = json.loads(raw)
    assert record["reason"] == "not_utf8", record
    assert base64.b64decode(record["entry_base64"]) == b"caf\xe9.example"


def test_a_worker_killed_mid_sweep_loses_nothing(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, domains_sandbox: DomainsSandbox
) -> None:
    domains = list(domains_sandbox.domains.values())[:150]
    redis_client.lpush("domains:start_urls", json.dumps({"domains": [d.entry for d in domains]}))
    settings = sweep_settings(domains_sandbox, FRONTIER_LEASE_SECONDS=5)
    metrics_port = free_port()
    # The first worker goes slowly (20 domains/s) and is killed once some are stored.
    slow = {**settings, "DOMAINS_RATE": 20, "METRICS_PORT": metrics_port, "METRICS_HOST": LOCAL}
    with sweep.background("domains", settings=slow) as first:
        poll(lambda: mongo.db.domains.count_documents({}) >= 20, timeout=60, what="a start")
        # Its Prometheus series do not grow with the domains (no per-domain labels).
        with urlopen(f"http://{LOCAL}:{metrics_port}/metrics", timeout=10) as answer:
            series = [line for line in answer.read().decode().splitlines() if line[:1] != "#"]
        assert 0 < len(series) <= 2000
        assert not [line for line in series if "domain=" in line]
        first.kill()
    assert mongo.db.domains.count_documents({}) < len(domains)
    assert redis_client.zcard("{domains}:leases") > 0  # the dead worker's requests

    result = sweep("domains", settings=settings)

    assert result.returncode == 0, result.stderr[-3000:]
    check_truth(stored(mongo), domains)
    assert redis_client.zcard("{domains}:leases") == 0
    assert redis_client.llen("{domains}:dead") == 0


def test_status_shows_classes_and_the_dead_share(
    sweep: Crawl, redis_client: redis.Redis, domains_sandbox: DomainsSandbox
) -> None:
    sample = list(domains_sandbox.domains.values())[:14]  # one of each behaviour
    redis_client.lpush("domains:start_urls", *(domain.entry for domain in sample))
    assert sweep("domains", settings=sweep_settings(domains_sandbox)).returncode == 0

    status = subprocess.run(
        [*sweep.command("domains")[:3], "status", "domains", "--json"],
        cwd=ROOT,
        env=sweep.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert status.returncode == 0, status.stderr[-2000:]
    report = json.loads(status.stdout)["spiders"]["domains"]["report"]
    dead = sum(1 for domain in sample if domain.code in (0, 404, 1000) or domain.code >= 500)
    assert report["checked"] == f"14, {dead} dead ({dead / 14:.1%})"
    expected: dict[str, int] = {}
    for domain in sample:
        expected[domain.status] = expected.get(domain.status, 0) + 1
    assert report["classes"] == expected


def test_a_100k_line_csv_is_read_as_the_sweep_goes(
    sweep: Crawl,
    redis_client: redis.Redis,
    mongo: Mongo,
    domains_sandbox: DomainsSandbox,
    tmp_path: Path,
) -> None:
    """The file is read a batch at a time as the queue empties: Redis never holds more than
    FILE_AHEAD_BATCHES batches of it, yet the sweep goes on past several such fills. (Read
    whole, all 100,000 domains land in Redis within seconds.)"""
    csv_file = tmp_path / "top100k.csv"
    with csv_file.open("w") as out:
        out.write("rank,domain\n")
        out.writelines(f"{rank},site-{rank}.test\n" for rank in range(1, 100_001))
    batch = 20
    most = (FILE_AHEAD_BATCHES + 1) * batch
    # The rate cap keeps the downloader full, as slow sites do in a real sweep: then Scrapy's
    # engine reads start requests without pause.
    settings = sweep_settings(
        domains_sandbox,
        FRONTIER_BATCH_SIZE=batch,
        CONCURRENT_REQUESTS=50,
        DOMAINS_RATE=100,
        MAX_IDLE_TIME_BEFORE_CLOSE=60,
    )
    queued: list[int] = []
    frontier = Frontier(redis_client, FrontierKeys("domains", "domains:start_urls"), NO_FILTER)

    def swept_past_three_fills() -> bool:
        queued.append(frontier.queued())
        return int(mongo.db.domains.count_documents({})) > 3 * most

    with sweep.background("domains", "-a", f"file={csv_file}", settings=settings) as worker:
        poll(swept_past_three_fills, timeout=120, what="the sweep to go on", pause=0.02)
        worker.kill()
    assert 0 < max(queued) <= most
    # In file order: what is stored is the file's first lines (ranks 1, 2, ...).
    ranks = sorted(int(d["domain"][5:-5]) for d in mongo.db.domains.find({}, {"domain": 1}))
    assert ranks[-1] < len(ranks) + 2 * most


def test_state_does_not_grow_with_the_domains_swept(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, domains_sandbox: DomainsSandbox
) -> None:
    """Bounded state: 3x the domains, the same Redis keys, stats fields and Prometheus series
    (bench/domains.py prints them after 20,000 domains)."""
    population = list(domains_sandbox.domains.values())
    small = sweep_and_count(sweep, redis_client, mongo, domains_sandbox, population[:100])
    large = sweep_and_count(sweep, redis_client, mongo, domains_sandbox, population)

    assert len(population) == 3 * 100
    # The same, but for a rare outcome that adds a counter (an exception's type) in one run.
    assert large["keys"] == small["keys"], f"{small} for 100 domains, {large} for 300"
    for name in ("series", "stats_fields"):
        assert large[name] <= small[name] + 3, f"{small} for 100 domains, {large} for 300"
    assert large["series"] <= 2000


def sweep_and_count(
    sweep: Crawl,
    redis_client: redis.Redis,
    mongo: Mongo,
    sandbox: DomainsSandbox,
    domains: list[FakeDomain],
) -> dict[str, int]:
    """Sweep ``domains`` from an empty Redis and MongoDB; the Prometheus series the worker
    exports once all are stored, then the Redis keys and stats fields left when it is done."""
    redis_client.flushdb()
    mongo.db.domains.delete_many({})
    redis_client.lpush("domains:start_urls", json.dumps({"domains": [d.entry for d in domains]}))
    port = free_port()
    # Idle for 4 s before it closes: its metrics are read as soon as the last domain is stored.
    settings = {"METRICS_PORT": port, "METRICS_HOST": LOCAL, "MAX_IDLE_TIME_BEFORE_CLOSE": 4}
    with sweep.background("domains", settings={**sweep_settings(sandbox), **settings}) as worker:
        poll(
            lambda: mongo.db.domains.count_documents({}) == len(domains),
            timeout=120,
            what="the sweep",
        )
        with urlopen(f"http://{LOCAL}:{port}/metrics", timeout=10) as answer:
            series = [line for line in answer.read().decode().splitlines() if line[:1] != "#"]
        assert worker.wait(60) == 0
    check_truth(stored(mongo), domains)
    assert not [line for line in series if "domain=" in line]
    return {
        "series": len(series),
        # The fleet's per-minute stats buckets expire by themselves: a sweep that crosses a
        # minute's end has one more, whatever its size.
        "keys": sum(1 for key in redis_client.scan_iter() if b":minute:" not in key),
        "stats_fields": int(redis_client.hlen("{domains}:stats")),
    }


def test_two_workers_share_the_fleet_rate(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, domains_sandbox: DomainsSandbox
) -> None:
    """DOMAINS_FLEET_RATE caps the fleet, not each worker: two workers at 15 probes/s for the
    fleet take as long as one would (two caps of their own: about half as long)."""
    quick = ("alive", "nxdomain", "not_found", "parked")
    domains = [d for d in domains_sandbox.domains.values() if d.behaviour in quick][:100]
    redis_client.lpush("domains:start_urls", json.dumps({"domains": [d.entry for d in domains]}))
    rate = 15
    settings = sweep_settings(domains_sandbox, DOMAINS_FLEET_RATE=rate, FRONTIER_BATCH_SIZE=10)
    with ExitStack() as running:
        workers = [
            running.enter_context(sweep.background("domains", settings=settings)) for _ in range(2)
        ]
        for worker in workers:
            worker.wait(120)
            assert worker.returncode == 0, worker.log_text()[-3000:]

    documents = stored(mongo)
    check_truth(documents, domains)
    stamps = sorted(document["checked_at"] for document in documents.values())
    # A stamp is taken when the answer is handled, not when the probe went: the first answers
    # of a worker just started (its first connections and lookups) can come late, bunched with
    # the ones after them, so the span counted starts at the 11th. The 89 probes after it went
    # at most 15 a second for the fleet: about 6 s (two caps of their own: 3 s); three quarters
    # of that allows for the turns each worker holds ahead and answers handled late.
    span = stamps[-1] - stamps[10]
    assert span >= 0.75 * (len(domains) - 11) / rate, span
    # One bucket shared (two workers at 15/s each would be done in half that time); it is
    # forgotten once full again, so nothing of it is left after the sweep.
    poll(lambda: not redis_client.keys("{domains}:rate:*"), 10, "the bucket forgotten")


def test_start_entries_are_read_while_a_slow_domain_waits(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, domains_sandbox: DomainsSandbox
) -> None:
    """Entries in Redis are leased as the queue has room, not when the worker is idle: the
    domains listed after a slow one are done while it still waits out its timeouts."""
    population = list(domains_sandbox.domains.values())
    slow = next(domain for domain in population if domain.behaviour == "slow")
    quick = [domain for domain in population if domain.behaviour == "alive"][:20]
    # One entry a batch; the list is read oldest first, so the slow domain's batch is first.
    redis_client.lpush("domains:start_urls", slow.entry, *(domain.entry for domain in quick))
    settings = sweep_settings(domains_sandbox, START_BATCH_SIZE=1, DOMAINS_DOWNLOAD_TIMEOUT=3)

    result = sweep("domains", settings=settings)

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    check_truth(documents, [slow, *quick])
    last_quick = max(documents[domain.name]["checked_at"] for domain in quick)
    assert last_quick < documents[slow.name]["checked_at"] - 3  # before its second try


METADATA = "metadata-service.test"  # a name whose address is the cloud metadata service's


class MetadataSandbox(DomainsSandbox):
    """The sandbox, and METADATA, whose DNS answer is 169.254.169.254."""

    def lookup(self, name: str) -> Answer:
        if name == METADATA:
            return Answer("address", "169.254.169.254")
        return super().lookup(name)


@pytest.fixture
def own_sandbox() -> Iterator[MetadataSandbox]:
    """A sandbox of this test's own: no other sweep's request reached it."""
    sandbox = MetadataSandbox(build_population(40, seed=5))
    runner = SandboxThread(sandbox)
    runner.start()
    yield sandbox
    runner.stop()


def test_a_domain_on_an_address_that_is_not_public_is_stored_and_never_probed(
    sweep: Crawl, redis_client: redis.Redis, mongo: Mongo, own_sandbox: MetadataSandbox
) -> None:
    """Without DOMAINS_PRIVATE_ADDRESSES, the sandbox's domains (on 127.x addresses where its
    servers listen) and a name on the cloud metadata service's address are stored as
    private_address with their address, and no request reaches the servers."""
    served = ("alive", "parked", "redirect_www", "not_found", "tls_only", "script_parked")
    by_behaviour = {d.behaviour: d for d in own_sandbox.domains.values()}
    domains = [by_behaviour[behaviour] for behaviour in served]
    gone = by_behaviour["nxdomain"]
    names = [*(domain.entry for domain in domains), METADATA, gone.entry]
    redis_client.lpush("domains:start_urls", json.dumps({"domains": names}))
    settings = sweep_settings(own_sandbox, DOMAINS_PRIVATE_ADDRESSES=False)

    result = sweep("domains", settings=settings)

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    expected = {domain.name: own_sandbox.address_of(domain) for domain in domains}
    expected[METADATA] = "169.254.169.254"
    for name, address in expected.items():
        document = documents[name]
        assert (document["status"], document["code"]) == ("private_address", 1000), document
        assert (document["address"], document["attempts"]) == (address, 1), document
        assert document["http_status"] is None
    assert own_sandbox.requests == {}  # nothing was sent to the sandbox's servers
    assert documents[gone.name]["status"] == "dns_not_found"
    assert documents[gone.name]["address"] is None
    # The same sandbox with the setting on: its servers are asked (the count above means it).
    other = by_behaviour["for_sale_shop"]
    redis_client.lpush("domains:start_urls", other.entry)
    assert sweep("domains", settings=sweep_settings(own_sandbox)).returncode == 0
    assert stored(mongo)[other.name]["status"] == "alive"
    assert own_sandbox.requests[other.name] == 1


EXAMPLES = itertools.count()


@pytest.fixture(scope="module")
def mix_sandbox() -> Iterator[DomainsSandbox]:
    """A sandbox of its own, without domains: the property test adds each example's hosts."""
    runner = SandboxThread(DomainsSandbox({}, slow_seconds=15))
    yield runner.start()
    runner.stop()


@hypothesis.settings(
    max_examples=5,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    behaviours=st.lists(st.sampled_from(sorted(EXPECTED)), min_size=1, max_size=30),
    seed=st.integers(0, 2**32),
)
def test_any_mix_of_hosts_is_stored_as_each_host_behaves(
    sweep: Crawl,
    redis_client: redis.Redis,
    mongo: Mongo,
    mix_sandbox: DomainsSandbox,
    behaviours: list[str],
    seed: int,
) -> None:
    """Hosts drawn from every behaviour, in any mix and order, with any spelling of their
    name: each is stored once, with the class, code and scheme of its truth."""
    example = next(EXAMPLES)
    rng = random.Random(seed)
    hosts = [
        fake_domain(f"mix{example}-{index}.test", behaviour, rng)
        for index, behaviour in enumerate(behaviours)
    ]
    mix_sandbox.domains.update({host.name: host for host in hosts})
    redis_client.lpush("domains:start_urls", json.dumps({"domains": [h.entry for h in hosts]}))

    result = sweep("domains", settings=sweep_settings(mix_sandbox))

    assert result.returncode == 0, result.stderr[-3000:]
    documents = {
        name: document
        for name, document in stored(mongo).items()
        if name.startswith(f"mix{example}-")
    }
    assert sorted(documents) == sorted(host.name for host in hosts)
    check_truth(documents, hosts)
