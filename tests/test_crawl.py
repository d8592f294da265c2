"""Crawls of the sandbox as users run them: `scrapy crawl` processes, real Redis and MongoDB."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, cast

import pytest
import redis
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.extensions import RemoteControl
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys
from crawler.middlewares import HostConcurrencyMiddleware, HostFullMiddleware
from crawler.recrawl.middleware import RecrawlMiddleware
from devtools.services import free_port, start_sandbox
from sandbox.profiles import sigi_beside_app_context
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox, closed_port, no_reactor_needed, scrapy

pytestmark = pytest.mark.integration

DATASET = build_dataset()


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


def _start_entries(client: redis.Redis, spider: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(f"{spider}:start_urls", 0, -1)]


def _expected_videos(*categories: int) -> set[str]:
    return {video.id for cat in categories for video in DATASET.videos_by_category[cat]}


def test_scrapy_list_shows_the_spiders() -> None:
    result = scrapy("list")
    assert result.returncode == 0, result.stderr
    assert {"explore", "profiles"} <= set(result.stdout.split())


@pytest.mark.parametrize("protocol", [None, 3])
def test_explore_then_profiles(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, protocol: int | None
) -> None:
    """The two spiders end to end, on the project's Redis protocol (RESP2) and on RESP3 asked
    for in REDIS_PARAMS: the replies of every path read the same."""
    params = {**project_settings.REDIS_PARAMS, "protocol": protocol} if protocol else None
    settings = {"REDIS_PARAMS": json.dumps(params)} if params else {}
    hellos = _hellos(redis_client)
    result = crawl("explore", "-a", "categories=2,4", settings=settings)
    assert (_hellos(redis_client) > hellos) == bool(protocol)  # RESP3 connections say HELLO
    assert result.returncode == 0, result.stderr[-3000:]

    videos = list(crawl.mongo.db.videos.find({}, {"_id": 0}))
    assert sorted(doc["video_id"] for doc in videos) == sorted(_expected_videos(2, 4))
    by_id = {video.id: video for video in DATASET.videos}
    for doc in videos:
        video = by_id[doc["video_id"]]
        assert doc["author_unique_id"] == video.author.unique_id
        assert doc["digg_count"] == video.stats.digg_count
        assert doc["category"] == video.category
        assert doc["first_seen"] <= doc["last_seen"]

    popular = DATASET.popular_authors(categories=[2, 4])
    handed = _start_entries(redis_client, "profiles")
    assert sorted(entry["unique_id"] for entry in handed) == sorted(popular)

    result = crawl("profiles", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    profiles = {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find({}, {"_id": 0})}
    assert set(profiles) == popular
    for unique_id, doc in profiles.items():
        author = DATASET.authors_by_unique_id[unique_id]
        assert doc["status"] == author.state
        if author.state == "ok":
            assert doc["follower_count"] == author.stats.follower_count
            assert doc["nickname"] == author.nickname
            assert doc["layout"] == ("sigi" if author.layout == "sigi" else "universal")

    served = sandbox.admin("stats")["by_path"]
    profile_paths = {path: count for path, count in served.items() if path.startswith("/@")}
    assert set(profile_paths.values()) == {1}, "a profile page was fetched twice"


def _hellos(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_hello", {})
    return int(stats.get("calls", 0))


def test_recrawl_updates_without_duplicates(crawl: Crawl, redis_client: redis.Redis) -> None:
    """The same category crawled twice: the second run fetches the feed again and updates
    every video in place (``last_seen`` moves on), inserting none twice."""
    expected = len(_expected_videos(3))
    for _ in range(2):
        result = crawl("explore", "-a", "categories=3")
        assert result.returncode == 0, result.stderr[-3000:]
    videos = crawl.mongo.db.videos
    assert videos.count_documents({}) == expected
    assert len(videos.distinct("video_id")) == expected
    stats = _stats(redis_client, "explore")
    assert int(stats["mongo/upserted"]) == expected
    assert int(stats["mongo/modified"]) == expected
    assert videos.count_documents({"$expr": {"$gt": ["$last_seen", "$first_seen"]}}) == expected


def test_bad_start_entries_are_set_aside_and_the_rest_is_crawled(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    good = [json.dumps({"category": 5, "max_pages": 1}), "6"]
    bad = ["", "{oops", '{"category": 5, "extra": 1}', "ftp://x/api/explore/item_list/", "77"]
    redis_client.lpush("explore:start_urls", *good[:1], *bad, *good[1:])
    result = crawl("explore", settings={"EXPLORE_MAX_PAGES": 1, "EXPLORE_HANDOFF_SPIDER": ""})
    assert result.returncode == 0, result.stderr[-3000:]

    categories = set(crawl.mongo.db.videos.distinct("category"))
    assert categories == {5, 6}
    set_aside = [
        json.loads(raw) for raw in redis_client.lrange("explore:start_urls:invalid", 0, -1)
    ]
    assert sorted(record["entry"] for record in set_aside) == sorted(bad)
    assert all(record["reason"] for record in set_aside)
    stats = _stats(redis_client, "explore")
    assert int(stats["start/invalid/empty"]) == 1
    assert int(stats["start/invalid/invalid_json"]) == 1
    assert int(stats["start/invalid/unknown_keys"]) == 1
    assert int(stats["start/invalid/bad_url"]) == 1
    assert int(stats["start/invalid/unknown_category"]) == 1
    assert "unknown_category" in result.stderr


def test_closing_worker_keeps_the_shared_queue(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    categories = (7, 8, 10, 11, 12)
    sandbox.admin("config", {"latency_ms": 200})
    first = crawl(
        "explore",
        "-a",
        "categories=" + ",".join(map(str, categories)),
        settings={"CLOSESPIDER_PAGECOUNT": 2, "CONCURRENT_REQUESTS": 1},
    )
    assert first.returncode == 0, first.stderr[-3000:]
    queued = Frontier(redis_client, FrontierKeys("explore", ""), DupefilterConfig()).queued()
    assert queued >= 3, "the closing worker emptied the queue"
    assert redis_client.zcard("{explore}:leases") == 0, "the closing worker kept its leases"

    second = crawl("explore")
    assert second.returncode == 0, second.stderr[-3000:]
    stored = set(crawl.mongo.db.videos.distinct("video_id"))
    assert stored == _expected_videos(*categories)
    for key in ("{explore}:queues", "{explore}:leases", "{explore}:data", "{explore}:delayed"):
        assert not redis_client.exists(key), key


def test_a_default_crawl_logs_no_warning(crawl: Crawl) -> None:
    result = crawl("explore", "-a", "categories=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert crawl.mongo.db.videos.count_documents({}) == len(_expected_videos(2))
    warnings = [line for line in result.stderr.splitlines() if " WARNING: " in line]
    assert warnings == []
    assert "Disabled" not in result.stderr


@pytest.mark.parametrize(
    ("component", "reason"),
    [
        (HostFullMiddleware, "POLITENESS_CONCURRENCY is 0"),
        (HostConcurrencyMiddleware, "POLITENESS_CONCURRENCY is 0"),
        (RecrawlMiddleware, "RECRAWL_ENABLED is off"),
        (RemoteControl, "REMOTE_CONTROL_ENABLED is off"),
    ],
)
def test_a_component_off_by_default_says_so_at_debug(
    component: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    defaults = {name: getattr(project_settings, name) for name in dir(project_settings)}
    crawler = get_crawler(Spider, {k: v for k, v in defaults.items() if k.isupper()})
    with caplog.at_level("DEBUG"), pytest.raises(NotConfigured) as off:
        component.from_crawler(crawler)
    assert off.value.args == ()  # Scrapy logs a NotConfigured with a message at WARNING
    (said,) = [record for record in caplog.records if "Disabled" in record.getMessage()]
    assert said.levelname == "DEBUG"
    assert said.getMessage().endswith(f"{component.__name__}: {reason}")


def test_remote_control_is_scrapys_when_turned_on_and_never_imported_when_off() -> None:
    settings = get_project_settings()
    assert "scrapy.extensions.remote_control.RemoteControl" not in settings["EXTENSIONS_BASE"]
    assert settings.getwithbase("EXTENSIONS")["crawler.extensions.RemoteControl"] == 0
    crawler = get_crawler(Spider, {"REMOTE_CONTROL_ENABLED": True, **no_reactor_needed()})
    console = RemoteControl.from_crawler(crawler)
    assert type(console).__module__ == "scrapy.extensions.remote_control"
    assert type(console).__name__ == "RemoteControl"


def test_missing_users_are_stored_as_such(crawl: Crawl, redis_client: redis.Redis) -> None:
    result = crawl("profiles", "-a", "users=no.such.user,@garden_325_neon,thechef319")
    assert result.returncode == 0, result.stderr[-3000:]
    statuses = {doc["unique_id"]: doc["status"] for doc in crawl.mongo.db.profiles.find()}
    assert statuses == {
        "no.such.user": "not_found",
        "garden_325_neon": "private",
        "thechef319": "banned",
    }
    stats = _stats(redis_client, "profiles")
    assert stats["profiles/status/not_found"] == "1"
    assert "ban/count" not in stats


def test_older_layout_pages_beside_an_app_context_script_are_profiles(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """A page whose rehydration script holds only the app's context, the user being in its
    SIGI_STATE, is the user's profile; it was taken for a block, a ban of the whole domain."""
    older = [a for a in DATASET.authors if (a.layout, a.state) == ("sigi", "ok")]
    beside = next(a for a in older if sigi_beside_app_context(a.unique_id))
    alone = next(a for a in older if not sigi_beside_app_context(a.unique_id))
    users = f"users={beside.unique_id},{alone.unique_id}"
    result = crawl("profiles", "-a", users, settings={"BAN_COOLDOWN": 0.5, "BAN_MAX_TIMES": 1})
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find({}, {"_id": 0})}
    assert set(stored) == {beside.unique_id, alone.unique_id}
    for author in (beside, alone):
        doc = stored[author.unique_id]
        assert (doc["status"], doc["layout"]) == ("ok", "sigi")
        assert doc["follower_count"] == author.stats.follower_count
    stats = _stats(redis_client, "profiles")
    assert stats["profiles/status/ok"] == "2"
    assert "ban/count" not in stats


def test_a_database_mongo_uri_names_is_said_and_items_go_to_mongo_database(
    crawl: Crawl,
) -> None:
    """MONGO_URI=mongodb+srv://.../mydb (Atlas' form) while items go to MONGO_DATABASE: a
    WARNING says how to store them in mydb; a URI naming its auth database (/admin) is not
    said. Items never move to another database on their own."""
    for path, said in (("/mydb", True), ("/admin", False)):
        crawl.mongo.db.profiles.drop()
        uri = crawl.mongo.uri
        crawl.mongo = replace(crawl.mongo, uri=f"{uri}{path}")
        result = crawl("profiles", "-a", "users=thechef319")
        crawl.mongo = replace(crawl.mongo, uri=uri)
        assert result.returncode == 0, result.stderr[-3000:]
        assert [doc["unique_id"] for doc in crawl.mongo.db.profiles.find()] == ["thechef319"]
        expected = f"MONGO_URI names the database {path[1:]}, but items go to MONGO_DATABASE"
        assert (expected in result.stderr) == said, result.stderr[-3000:]


def test_unreachable_mongodb_fails_at_start_with_masked_uri(crawl: Crawl) -> None:
    crawl.mongo = replace(crawl.mongo, uri=f"mongodb://bob:s3cret@127.0.0.1:{free_port()}")
    result = crawl("profiles", "-a", "users=someone", settings={"MONGO_CONNECT_TIMEOUT_MS": 300})
    assert "mongodb://bob:***@127.0.0.1" in result.stderr
    assert "s3cret" not in result.stderr
    assert "is unavailable" in result.stderr
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_unreachable_redis_fails_with_a_clear_error(crawl: Crawl) -> None:
    crawl.redis_url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    result = crawl(
        "profiles",
        settings={
            "REDIS_PARAMS": json.dumps(
                {"redis_cls": "crawler.connection.Redis", "socket_connect_timeout": 1}
            )
        },
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "ERROR: Crawl not started: Redis at redis://:***@127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr
    assert "s3cret" not in result.stderr


def test_failed_downloads_become_dead_letters_that_can_be_requeued(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    with closed_port() as port:
        _dead_letters_then_requeue(crawl, port)


def _dead_letters_then_requeue(crawl: Crawl, port: int) -> None:
    dead_host = f"http://127.0.0.1:{port}"
    result = crawl(
        "profiles",
        "-a",
        "users=cook.anna,some.one",
        # The refused host is blocked (the circuit breaker) for a fraction of a second only.
        settings={"PROFILES_BASE_URL": dead_host, "RETRY_TIMES": 1, "HOST_BLOCK_START": 0.2},
    )
    assert result.returncode == 0, result.stderr[-3000:]

    def frontier(*args: str) -> str:
        done = scrapy("frontier", "profiles", *args, env=crawl.env())
        assert done.returncode == 0, done.stderr
        return done.stdout

    letters = json.loads(frontier("dead", "--json"))
    assert sorted(letter["request"]["url"] for letter in letters) == [
        f"{dead_host}/@cook.anna",
        f"{dead_host}/@some.one",
    ]
    assert {letter["failure"]["reason"] for letter in letters} == {
        "download_error:DownloadConnectionRefusedError"
    }
    assert all(letter["failure"]["attempts"] == 2 for letter in letters)
    assert json.loads(frontier("status", "--json"))["dead"] == 2

    assert "requeued 2" in frontier("requeue")
    status = json.loads(frontier("status", "--json"))
    assert (status["dead"], status["queue"]) == (0, 2)
    revived, _ = start_sandbox(port)
    try:
        result = crawl("profiles")  # the host is back: the requeued requests now succeed
    finally:
        revived.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    assert crawl.mongo.db.profiles.count_documents({}) == 2


def test_an_unknown_spider_argument_stops_the_start_naming_it(crawl: Crawl) -> None:
    result = crawl("explore", "-a", "category=1")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "category" in errors[0]
    assert "categories" in errors[0]
    assert "Traceback" not in result.stderr


def test_scrapyd_job_argument_is_accepted(crawl: Crawl) -> None:
    result = crawl("profiles", "-a", "_job=abc123", "-a", "users=thechef319")
    assert result.returncode == 0, result.stderr[-3000:]
    assert crawl.mongo.db.profiles.count_documents({}) == 1


def test_an_idle_worker_says_once_where_it_waits(crawl: Crawl) -> None:
    result = crawl("profiles", settings={"MAX_IDLE_TIME_BEFORE_CLOSE": 3})
    assert result.returncode == 0, result.stderr[-3000:]
    waiting = [line for line in result.stderr.splitlines() if "waiting for start entries" in line]
    assert len(waiting) == 1, result.stderr[-3000:]
    assert "profiles:start_urls" in waiting[0]
    assert crawl.redis_url.rsplit("/", 1)[0] in waiting[0]


@pytest.mark.parametrize("action", ["status", "dead", "requeue"])
def test_frontier_command_with_redis_down_says_so_in_one_line(crawl: Crawl, action: str) -> None:
    env = {**crawl.env(), "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    result = scrapy("frontier", "profiles", action, env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Redis at redis://127.0.0.1:")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "example"),
    [
        ("status", "scrapy status profiles --json        one spider, as JSON"),
        ("frontier", "scrapy frontier profiles dead --limit 20     the newest dead letters"),
    ],
)
def test_command_help_keeps_its_examples_one_per_line(command: str, example: str) -> None:
    result = scrapy(command, "-h")
    assert result.returncode == 0, result.stderr
    assert any(line.startswith(example) for line in result.stdout.splitlines()), result.stdout
