"""The frontier and whole crawls on a real Redis Cluster of three masters on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy import Request
from scrapy.settings import Settings

from crawler import settings as project_settings
from crawler.connection import (
    ClusterUnavailable,
    RedisCluster,
    RedisUnavailable,
    redis_from_settings,
)
from crawler.control.jobs import (
    act_on_job,
    forget_ended_jobs,
)
from crawler.control.pause import pause_crawl, read_pause, resume_crawl
from crawler.fleet.measure import fleet_sizing
from crawler.frontier import codec
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.jobs import JobBook
from crawler.frontier.queue import Frontier, Pending
from crawler.keys import FrontierKeys, job_key
from crawler.meta import JOB_META
from crawler.recrawl.store import Revisit, RevisitStore
from devtools.services import free_port
from sandbox.seed import build_dataset
from tests.cluster import LocalCluster, start_cluster
from tests.harness import Crawl, Mongo, Sandbox, scrapy

pytestmark = pytest.mark.integration

DATASET = build_dataset()
FRONTIER_KEYS = ("queues", "leases", "owner", "data", "delayed")


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


def _client(url: str, **params: Any) -> RedisCluster:
    client = redis_from_settings(
        Settings({"REDIS_URL": url, "REDIS_CLUSTER": True, "REDIS_PARAMS": params})
    )
    assert isinstance(client, RedisCluster)
    return client


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = _client(redis_cluster.url)
    client.flushall()
    yield client
    client.close()


def _spider_on_two_nodes(client: RedisCluster) -> FrontierKeys:
    """Keys of a fresh spider whose frontier and start list are served by different nodes, so
    one flush's pipeline spans two nodes."""
    while True:
        name = f"spider{uuid.uuid4().hex[:8]}"
        keys = FrontierKeys(name, f"{name}:start_urls")
        if _node(client, keys.queues) != _node(client, keys.start):
            return keys


def _node(client: RedisCluster, key: str) -> str:
    """The name (host:port) of the node serving ``key``."""
    return str(cast(Any, client).get_node_from_key(key).name)


def _pending(url: str, **kwargs: Any) -> Pending:
    return Pending(json.dumps({"url": url}), hashlib.sha1(url.encode()).digest(), **kwargs)


def test_settings_choose_the_cluster_client(redis_cluster: LocalCluster) -> None:
    for value, expected in (("yes", "True"), ("", "False")):
        shown = scrapy(
            "settings", "--get", "REDIS_CLUSTER", env={**os.environ, "REDIS_CLUSTER": value}
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip() == expected
    # The project's plain client class and REDIS_DB=0 are fine with REDIS_CLUSTER on.
    client = _client(redis_cluster.url, redis_cls="crawler.connection.Redis", db=0)
    assert {node.port for node in cast(Any, client).get_primaries()} == set(redis_cluster.ports)
    client.close()


def test_unreachable_cluster_fails_with_a_clear_error() -> None:
    with pytest.raises(RedisUnavailable, match=r"redis://:\*\*\*@127\.0\.0\.1") as raised:
        _client(f"redis://:s3cret@127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    assert "s3cret" not in str(raised.value)


def test_frontier_on_the_cluster(cluster_client: RedisCluster) -> None:
    client = cluster_client
    keys = _spider_on_two_nodes(client)
    frontier = Frontier(client, keys, DupefilterConfig("bloom", capacity=1000))

    # The start list and its leases share a slot; every other key shares the spider's.
    assert client.cluster_keyslot(keys.start) == client.cluster_keyslot(keys.start_leases)
    spider_slot = client.cluster_keyslot(keys.queues)
    internal = [*FRONTIER_KEYS, "seq", "dead", "dupefilter", "dupefilter:meta", "dupefilter:0"]
    for name in [*internal, "stats", "handed_authors"]:
        assert client.cluster_keyslot("{" + keys.spider + "}:" + name) == spider_slot, name

    first = [_pending(f"https://x/{i}") for i in range(4)]
    assert frontier.schedule([*first, first[0]]) == [1, 1, 1, 1, 0]
    assert frontier.schedule([first[1], _pending("https://x/again", dont_filter=True)])
    assert client.exists("{" + keys.spider + "}:dupefilter:meta")
    assert client.exists("{" + keys.spider + "}:dupefilter:0")

    popped = frontier.pop(5, 60, "w1")
    assert [json.loads(data)["url"] for _, data in popped.leased] == [
        *(f"https://x/{i}" for i in range(4)),
        "https://x/again",
    ]
    ids = [lease_id for lease_id, _ in popped.leased]
    assert frontier.settle([("a", ids[0], ""), ("r", ids[1], "")], "w1", 60) == 2
    assert frontier.settle([("a", ids[2], "")], "someone-else", 60) == 0
    failure = json.dumps({"reason": "test"})
    assert frontier.settle([("d", ids[2], failure), ("n", ids[3], "")], "w1", 60) == 2
    assert frontier.sizes() == {
        "queue": 1,
        "leased": 2,
        "delayed": 0,
        "dead": 1,
        "start": 0,
        "start_leased": 0,
    }
    assert frontier.dead_letters()[0]["request"]["url"] == "https://x/2"

    client.lpush(keys.start, "a", "b", "c")
    members = frontier.pop_start(2, 60, "w1")
    assert [member.split(b"\n", 1)[1] for member in members] == [b"a", b"b"]

    # What a flush and a renewal send: scripts and start-lease commands in one pipeline that
    # spans the spider's node and the start list's node.
    pipe = client.pipeline(transaction=False)
    frontier.schedule([_pending("https://x/new")], client=pipe)
    frontier.settle([("a", ids[3], ""), ("a", ids[4], "")], "w1", 60, client=pipe)
    frontier.ack_start(members[:1], client=pipe)
    frontier.renew_start(members[1:], 60, client=pipe)
    assert pipe.execute() == [[1], 2, 1, 0]

    assert frontier.requeue_dead(10).moved == 1
    leased = frontier.pop(10, 60, "w2").leased
    assert sorted(codec.loads(data)["url"] for _, data in leased) == [
        "https://x/1",
        "https://x/2",
        "https://x/new",
    ]
    frontier.settle([("a", lease_id, "") for lease_id, _ in leased], "w2", 60)
    (retaken,) = frontier.pop_start(5, 60, "w2")
    assert retaken.endswith(b"\nc")
    frontier.ack_start([retaken, members[1]])
    assert not any(frontier.sizes().values())
    for name in FRONTIER_KEYS:
        assert not client.exists("{" + keys.spider + "}:" + name), name


def test_sizing_on_the_cluster(cluster_client: RedisCluster) -> None:
    """The fleet's sizing reads the frontier, the start list (on another node) and the pause:
    leased work counts, and a paused crawl wants the minimum."""
    client = cluster_client
    settings = Settings()
    settings.setmodule(project_settings)
    keys = FrontierKeys("profiles", "profiles:start_urls")
    assert _node(client, keys.queues) != _node(client, keys.start)
    frontier = Frontier(client, keys, DupefilterConfig("none"))
    frontier.schedule([_pending(f"https://x/{i}") for i in range(10)])
    client.lpush(keys.start, "someone")
    assert len(frontier.pop(4, 60, "w1").leased) == 4
    sizing = fleet_sizing(client, settings, "profiles")
    assert (sizing.work, sizing.leased, sizing.ready, sizing.wanted) == (11, 4, 7, 1)
    pause_crawl(client, "profiles", "ops", "test")
    assert fleet_sizing(client, settings, "profiles").to_json()["paused"] is True
    assert fleet_sizing(client, settings, "profiles").wanted == 0


def test_due_revisits_are_sized_on_the_cluster(cluster_client: RedisCluster) -> None:
    """A spider that revisits wants a worker while a revisit is due, read in the sizing's round
    trip beside the queue's head (the start list on another node)."""
    settings = Settings()
    settings.setmodule(project_settings)
    settings.set("RECRAWL_ENABLED", True)
    revisits = RevisitStore(cluster_client, "profiles")
    revisits.add([Revisit("ab" * 16, time.time() + 3600, '{"u": "https://x/"}')])
    assert fleet_sizing(cluster_client, settings, "profiles").wanted == 0
    revisits.add([Revisit("cd" * 16, time.time() - 5, '{"u": "https://y/"}')])
    sizing = fleet_sizing(cluster_client, settings, "profiles")
    assert (sizing.wanted, sizing.revisits_due, sizing.work) == (1, 1, 0)


def test_crawl_jobs_on_the_cluster(cluster_client: RedisCluster) -> None:
    """A job numbered, paused, resumed, given a budget, counted and cancelled (its start
    entries on another node), and forgotten once its state is gone, and the fleet paused and
    resumed, on the cluster."""
    client = cluster_client
    keys = _spider_on_two_nodes(client)
    frontier = Frontier(client, keys, DupefilterConfig("none"))
    book = JobBook(client, keys.spider)
    number = book.number("acme")
    assert book.number("acme") == number

    def of_job(index: int, job: int | None) -> Pending:
        request = Request(f"https://x/{index}", meta={} if job is None else {JOB_META: job})
        record = codec.dumps(codec.request_record(request, None))
        return Pending(record, hashlib.sha1(request.url.encode()).digest())

    act_on_job(client, keys, "acme", "pause")
    frontier.schedule([of_job(n, number if n % 2 else None) for n in range(6)])
    assert len(frontier.pop(10, 60, "w1").leased) == 3  # the job's three are parked
    assert act_on_job(client, keys, "acme").parked == 3
    act_on_job(client, keys, "acme", "resume")
    act_on_job(client, keys, "acme", "limit", 2)
    leased = frontier.pop(10, 60, "w1").leased
    assert [codec.loads(data)["meta"] for _, data in leased] == [{JOB_META: number}] * 2
    frontier.settle([("a", leased[0][0], ""), ("d", leased[1][0], "{}")], "w1", 60)
    status = act_on_job(client, keys, "acme")
    assert (status.sent, status.done, status.dead) == (2, 1, 1)

    client.lpush(keys.start, json.dumps({"url": "https://x/e", "job": "acme"}), "https://x/f")
    frontier.schedule([of_job(10, number)])
    cancelled = act_on_job(client, keys, "acme", "cancel")
    assert (cancelled.queued, cancelled.starts) == (1, 1)
    assert client.lrange(keys.start, 0, -1) == [b"https://x/f"]
    assert frontier.pop(10, 60, "w1").leased == []

    assert pause_crawl(client, keys.spider, "ops", "db upgrade").reason == "db upgrade"
    lifted = resume_crawl(client, keys.spider)
    assert lifted is not None
    assert lifted.by == "ops"
    assert read_pause(client, keys.spider) is None

    client.delete(job_key(keys.spider, "acme"))  # its state expired
    assert forget_ended_jobs(client, keys) == ["acme"]
    assert JobBook(client, keys.spider).number("acme") > number


def test_cluster_outage_is_a_redis_error_and_loses_nothing(
    redis_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    """While no node answers, commands and pipelines fail with a RedisError (what the scheduler
    backs off on) instead of redis-py's RedisClusterException; afterwards all is there."""
    client = _client(
        redis_cluster.url,
        socket_timeout=0.3,
        socket_connect_timeout=0.3,
        outage_retry=Retry(NoBackoff(), 0),
    )
    keys = _spider_on_two_nodes(client)
    frontier = Frontier(client, keys, DupefilterConfig())
    assert frontier.schedule([_pending("https://x/kept")]) == [1]
    client.lpush(keys.start, "entry")

    pids = [node.process.pid for node in redis_cluster.nodes]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(ClusterUnavailable):
            # The node may still run this pop when it wakes, its answer lost: the lease it
            # takes then runs out (here at once) and the request goes back to the queue.
            frontier.pop(1, 0, "w1")
        with pytest.raises(ClusterUnavailable):
            frontier.sizes()  # a pipeline
        assert time.monotonic() - started < 20
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)

    redis_cluster.wait_ok()
    assert [data for _, data in frontier.pop(5, 60, "w1").leased] == ['{"url": "https://x/kept"}']
    (member,) = frontier.pop_start(5, 60, "w1")
    assert member.endswith(b"\nentry")
    client.close()


def test_explore_then_profiles_on_the_cluster(
    redis_cluster: LocalCluster, cluster_client: RedisCluster, mongo: Mongo, sandbox: Sandbox
) -> None:
    crawl = Crawl(redis_cluster.url, mongo, sandbox.url)
    settings = {"REDIS_CLUSTER": True}

    result = crawl("explore", "-a", "categories=2", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    videos = {doc["video_id"]: doc for doc in mongo.db.videos.find({}, {"_id": 0})}
    assert set(videos) == {video.id for video in DATASET.videos_by_category[2]}
    for video in DATASET.videos_by_category[2]:
        assert videos[video.id]["digg_count"] == video.stats.digg_count

    popular = DATASET.popular_authors(categories=[2])
    handed = [json.loads(raw) for raw in cluster_client.lrange("profiles:start_urls", 0, -1)]
    assert sorted(entry["unique_id"] for entry in handed) == sorted(popular)

    result = crawl("profiles", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    profiles = {doc["unique_id"]: doc for doc in mongo.db.profiles.find({}, {"_id": 0})}
    assert set(profiles) == popular
    for unique_id, doc in profiles.items():
        author = DATASET.authors_by_unique_id[unique_id]
        assert doc["status"] == author.state
        if author.state == "ok":
            assert doc["follower_count"] == author.stats.follower_count

    left = {key.decode() for key in cluster_client.scan_iter()}
    assert all(key.startswith(("{explore}:", "{profiles}:")) for key in left), left
    for spider in ("explore", "profiles"):
        tagged = [key for key in left if key.startswith("{" + spider + "}:")]
        assert {cluster_client.cluster_keyslot(key) for key in tagged} == {
            cluster_client.cluster_keyslot("{" + spider + "}")
        }
        keys = FrontierKeys(spider, f"{spider}:start_urls")
        sizes = Frontier(cluster_client, keys, DupefilterConfig()).sizes()
        assert not any(sizes.values()), (spider, sizes)
        for name in FRONTIER_KEYS:
            assert not cluster_client.exists("{" + spider + "}:" + name), (spider, name)
        stats = cluster_client.hgetall("{" + spider + "}:stats")
        assert stats[b"finish_reason"] == b"finished", spider
        assert int(stats[b"item_scraped_count"]) > 0, spider
