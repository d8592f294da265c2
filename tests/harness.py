"""What tests hold on to: handles on the real servers and a way to run `scrapy crawl`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pymongo
import redis
from scrapy.utils.reactor import is_reactor_installed

from crawler.frontier.codec import expand
from devtools.services import ServerProcess, ServiceError, free_port, start_mongo, start_redis
from sandbox.client import SandboxClient
from sandbox.hosts import HostsWeb, serve
from sandbox.hosts import free_port as free_hosts_port
from tests import forkserver

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
# Where crawls started by tests spill MongoDB batches, away from the working tree: one directory
# per test process, as a crawl replays the spill files other crawls of its spider left there.
SPILL_DIR = Path(tempfile.gettempdir()) / f"crawler-test-spill-{os.getpid()}"


@dataclass
class Mongo:
    uri: str
    database: str
    client: pymongo.MongoClient[dict[str, Any]]

    @property
    def db(self) -> Any:
        return self.client[self.database]


@dataclass
class Restartable:
    """A Redis (with its append-only file) or a MongoDB of the test's own, on a port and data
    directory of its own, that the test stops, or kills (-9), and starts again."""

    port: int
    data: Path
    kind: str = "redis"  # or "mongo"
    server: ServerProcess | None = None
    redis_args: tuple[str, ...] = ()  # e.g. ("--appendonly", "no"): it starts again empty

    @property
    def uri(self) -> str:
        if self.kind == "redis":
            return f"redis://127.0.0.1:{self.port}/0"
        return f"mongodb://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.kind == "redis":
            self.server = start_redis(self.port, self.data, *self.redis_args)
        else:
            self.server = start_mongo(self.port, self.data)

    def kill(self) -> None:
        assert self.server is not None
        self.server.process.send_signal(signal.SIGKILL)
        self.server.process.wait(10)
        self.server = None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


# The sandbox a test crawls, driven through its admin API.
Sandbox = SandboxClient


@dataclass
class Crawl:
    """How a test runs ``scrapy crawl`` as a user would: a real process against real servers."""

    redis_url: str
    mongo: Mongo
    sandbox_url: str

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            REDIS_URL=self.redis_url,
            MONGO_URI=self.mongo.uri,
            MONGO_DATABASE=self.mongo.database,
            MONGO_SPILL_DIR=str(SPILL_DIR),
            PYTHONFAULTHANDLER="1",  # a stuck crawl's stacks: Worker.dump_stacks
        )
        return env

    root: Path = ROOT

    def command(self, spider: str, *args: str, settings: dict[str, Any] | None = None) -> list[str]:
        """``scrapy crawl`` aimed at the sandbox, closing once the fleet is idle for 1 s (looked
        at every 0.2 s), with no rate limit (tests of politeness set one) and items written to
        MongoDB 0.1 s after they are scraped (an item's request waits for its write)."""
        merged = {
            "EXPLORE_BASE_URL": self.sandbox_url,
            "PROFILES_BASE_URL": self.sandbox_url,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
            "IDLE_POLL_INTERVAL": 0.2,
            "POLITENESS_RATE": 0,
            "MONGO_FLUSH_INTERVAL": 0.1,
            **(settings or {}),
        }
        command = [sys.executable, "-m", "scrapy", "crawl", spider, *args]
        for name, value in merged.items():
            command += ["-s", f"{name}={value}"]
        return command

    def autoscale(self, spider: str, *options: str, settings: dict[str, Any]) -> list[str]:
        """``scrapy fleet autoscale SPIDER --local --json OPTIONS``, its workers started as
        ``command`` has them (with ``settings``)."""
        command = self.command(spider, settings=settings)
        pairs = command[command.index(spider) + 1 :]
        fleet = ("fleet", "autoscale", spider, "--local", "--json")
        return [*forkserver.SCRAPY, *fleet, *options, *pairs]

    def background(
        self,
        spider: str,
        *args: str,
        settings: dict[str, Any] | None = None,
        log: Path | None = None,
    ) -> AbstractContextManager[Worker]:
        """``scrapy crawl`` (as ``command`` has it) running while the block runs: see
        ``background``."""
        return background(self.command(spider, *args, settings=settings), self.env(), log)

    def __call__(
        self, spider: str, *args: str, settings: dict[str, Any] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return forkserver.run(
            self.command(spider, *args, settings=settings), ROOT, self.env(), timeout
        )


class StillRunning(subprocess.TimeoutExpired):
    """A background worker still running after the time it was waited for; says how its log
    ends (what it was waiting for)."""

    def __str__(self) -> str:
        return f"{super().__str__()}; its log ends:\n{self.output}"


@dataclass(eq=False)
class Worker:
    """A crawl running in the background (``background``), its output in ``log``."""

    process: subprocess.Popen[bytes] | forkserver.Forked
    log: Path
    terminated: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status; ``StillRunning`` (a ``subprocess.TimeoutExpired`` that shows the end
        of its log) if it still runs after ``timeout``."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise StillRunning(exc.cmd, exc.timeout, self.log_text()[-4000:]) from None

    def send_signal(self, signal_number: int) -> None:
        self.process.send_signal(signal_number)

    def kill(self) -> None:
        """kill -9, and reap it."""
        self.process.kill()
        self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM (a graceful close), sent once: a second one makes Scrapy close uncleanly."""
        if not self.terminated and self.process.poll() is None:
            self.process.terminate()
            self.terminated = True

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM unless sent already, kill -9 if it still runs ``timeout`` seconds later."""
        if self.process.poll() is not None:
            return
        self.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def dump_stacks(self, timeout: float = 10) -> None:
        """If it still runs: have it write each of its threads' stacks to its log and end
        (SIGABRT, which the crawls' faulthandler answers), to show where it was stuck."""
        if self.process.poll() is None:
            self.send_signal(signal.SIGABRT)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)

    def log_text(self) -> str:
        """Everything it wrote, stdout and stderr together."""
        return self.log.read_text(errors="replace")


def scrapy(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m scrapy ARGS`` in ROOT, run to its end with its output captured (as text)."""
    environment = dict(os.environ) if env is None else env
    return forkserver.run([*forkserver.SCRAPY, *args], ROOT, environment, timeout)


def dead_letters(client: redis.Redis, spider: str) -> dict[str, dict[str, Any]]:
    """The spider's dead letters in Redis: each request's URL and its failure."""
    letters = [json.loads(raw) for raw in client.lrange("{" + spider + "}:dead", 0, -1)]
    return {expand(letter["request"])["url"]: letter["failure"] for letter in letters}


def autoscaler_steps(log: Path) -> list[dict[str, Any]]:
    """The looks ``scrapy fleet autoscale --json`` printed to ``log``: wanted, running,
    started, stopped, time, and the workers that exited since the look before."""
    return [line for line in _autoscaler_lines(log) if "wanted" in line]


def autoscaler_exits(log: Path) -> dict[str, int]:
    """Worker -> exit status, of every worker ``scrapy fleet autoscale --json`` saw exit."""
    return {w: code for line in _autoscaler_lines(log) for w, code in line["exited"].items()}


def _autoscaler_lines(log: Path) -> list[dict[str, Any]]:
    """What the autoscaler printed: one JSON line per look, and one once it closed."""
    lines = log.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


@contextmanager
def background(
    command: Sequence[str], env: dict[str, str], log: Path | None = None
) -> Iterator[Worker]:
    """``command`` started in ROOT with ``env``, its stdout and stderr written to ``log`` (to a
    file of its own, removed afterwards, when None), while the block runs; stopped (and reaped)
    at its end if it still runs then."""
    with ExitStack() as cleanup:
        if log is None:
            log = Path(cleanup.enter_context(tempfile.TemporaryDirectory())) / "worker.log"
        with open(log, "wb") as out:
            process = forkserver.start(command, ROOT, env, out, out)
        worker = Worker(process, log)
        try:
            yield worker
        finally:
            worker.stop()


# How often a test polls a count in MongoDB while a crawl runs: the MongoDB-wire server of the
# tests counts by reading every document (10 ms of its CPU for 300), so a count every 0.05 s
# costs it a fifth of a core; every 0.25 s, a twenty-fifth.
MONGO_PAUSE = 0.25


@contextmanager
def status_page(env: dict[str, str], *args: str) -> Iterator[str]:
    """``scrapy status [args] --serve 0`` in the background: the fleet page's URL, read from
    the command's first line; stopped with SIGINT afterwards, and asserted to exit 0."""
    command = [*forkserver.SCRAPY, "status", *args, "--serve", "0"]
    read, write = os.pipe()
    with open(read, encoding="utf-8") as output:  # open until it exits: it may write more
        with open(write, "wb") as out, open(os.devnull, "wb") as nowhere:
            process = forkserver.start(command, ROOT, env, out, nowhere)
        try:
            line = output.readline()  # EOF if it exits first: the write end is its alone
            assert line.startswith("Fleet page at http://"), line
            yield line.split()[3]
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0


def no_reactor_needed() -> dict[str, bool]:
    """The setting for a crawler built in the test's process that runs nothing: no reactor is
    installed, but one an earlier test of the process installed is accepted (Scrapy refuses
    a crawler with TWISTED_REACTOR_ENABLED off once a reactor is installed)."""
    return {"TWISTED_REACTOR_ENABLED": is_reactor_installed()}


def poll(
    check: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "the condition",
    pause: float = 0.05,
) -> T:
    """Call ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause)


def on_free_port(start: Callable[[int], T], attempts: int = 3) -> T:
    """``start(port)`` on a free loopback port, again on another one when that port was taken
    in between (by a server of another test process, say): the start then fails at once."""
    for attempt in range(1, attempts + 1):
        try:
            return start(free_port())
        except ServiceError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs and that no free_port()
    (of any test process) hands out meanwhile: it is bound, not listening. A server started on
    it (Redis, aiohttp, Twisted: all bind with SO_REUSEADDR) can still listen there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


@contextmanager
def served_hosts(hosts: int, pages: int) -> Iterator[HostsWeb]:
    """A web of ``hosts`` hosts on their own loopback addresses (sandbox/hosts.py), ``pages``
    pages each, served from a thread of this process, so a test reads its arrivals directly."""
    web = HostsWeb(hosts, pages, free_hosts_port(hosts))
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(serve(web))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield web
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
