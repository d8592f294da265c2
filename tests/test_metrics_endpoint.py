"""A worker's ``/metrics`` (crawler/observability/endpoint.py), served on a real reactor in a
process of its own: what it answers, and that a scrape under way never keeps the worker from
exiting when its crawl ends."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.harness import ROOT

SERVE = """
import json, socket, sys, threading, time, urllib.request
from prometheus_client import CollectorRegistry, Counter
from twisted.internet import reactor
from crawler.observability.endpoint import listen, site

registry = CollectorRegistry()
pages = Counter("pages", "pages fetched", ["status"], registry=registry)
other = Counter("other", "something else", registry=registry)
for status in range(3000):  # an answer long enough to be under way as the reactor stops
    pages.labels(str(status)).inc(status)
port = listen("127.0.0.1", [0], site(registry, None)).port
url = f"http://127.0.0.1:{port}/metrics"

def get(path="", **headers):
    request = urllib.request.Request(url + path, headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = __import__("gzip").decompress(body)
        return [response.headers["Content-Type"], response.headers.get("Content-Encoding"),
                body.decode()]

def answers():
    try:
        found = {
            "plain": get(),
            "openmetrics": get(Accept="application/openmetrics-text; version=1.0.0"),
            "gzip": get(**{"Accept-Encoding": "gzip"}),
            "named": get("?name[]=other_total&name[]="),
        }
        print(json.dumps(found))
    finally:
        reactor.callFromThread(reactor.stop)

class StopsTheReactor:  # stops the reactor while a scrape renders, as a crawl may end then
    def collect(self):
        reactor.callFromThread(reactor.stop)
        time.sleep(0.5)  # still rendering as the reactor shuts down
        return []

def scrape():
    with socket.create_connection(("127.0.0.1", port), timeout=60) as client:
        client.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        client.recv(1 << 16)

if sys.argv[1] == "answers":
    threading.Thread(target=answers, daemon=True).start()
else:
    registry.register(StopsTheReactor())
    threading.Thread(target=scrape, daemon=True).start()
reactor.run()
print("exited")
"""


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SERVE, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_metrics_answer_in_the_format_asked_for() -> None:
    served = _serve("answers")
    assert served.returncode == 0, served.stderr
    assert served.stdout.startswith("{"), served.stderr
    found = json.loads(served.stdout.splitlines()[0])
    content_type, encoding, body = found["plain"]
    assert content_type.startswith("text/plain; version=0.0.4")
    assert encoding is None
    assert 'pages_total{status="404"} 404.0' in body
    assert found["openmetrics"][0].startswith("application/openmetrics-text")
    assert found["openmetrics"][2].endswith("# EOF\n")
    assert found["gzip"][1] == "gzip"
    assert found["gzip"][2] == body
    named = found["named"][2]
    assert "other_total 0.0" in named
    assert "pages_total" not in named


def test_a_scrape_under_way_when_the_reactor_stops_never_keeps_the_process() -> None:
    """prometheus_client's own resource answered on the reactor's thread pool, and waited for
    the reactor to send its answer: the process never exited (this test timed out)."""
    try:
        served = _serve("stop")
    except subprocess.TimeoutExpired:
        pytest.fail("the process was still running 2 min after its reactor stopped")
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip().endswith("exited")
