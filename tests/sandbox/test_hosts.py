"""The many-hosts web (sandbox/hosts.py): what it answers, and when it says a request arrived."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time

from sandbox.hosts import HostsWeb, host_address
from tests.harness import ROOT, poll, served_hosts


def _get(sock: socket.socket, path: str) -> bytes:
    """One request on a kept-alive connection, and its whole answer."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return _answer(sock)


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0] + b"\r\n" + body


def _cpu_seconds(pid: int) -> float:
    """The user and system CPU time process ``pid`` has used (Linux's /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _block_loop(web: HostsWeb, seconds: float) -> threading.Event:
    """Keep the server's loop busy for ``seconds`` (a starved server process); set once it is."""
    busy = threading.Event()

    def hog() -> None:
        busy.set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    assert web.server is not None
    web.server.loop.call_soon_threadsafe(hog)
    return busy


def test_pages_robots_and_misses_on_one_kept_alive_connection() -> None:
    with served_hosts(3, 4) as web, socket.create_connection((host_address(2), web.port)) as sock:
        assert _get(sock, "/robots.txt").startswith(b"HTTP/1.1 200 OK\r\nUser-agent: *")
        page = _get(sock, "/p/3")
        assert page.startswith(b"HTTP/1.1 200 OK")
        assert b"127.0.1.3 3" in page
        assert _get(sock, "/p/4").startswith(b"HTTP/1.1 404")
        assert [path for _, path in web.arrivals[host_address(2)]] == [
            "/robots.txt",
            "/p/3",
            "/p/4",
        ]
        assert set(web.arrivals) == {host_address(2)}


def test_a_dropping_host_closes_without_an_answer_and_counts_the_request() -> None:
    with served_hosts(2, 2) as web:
        web.faults[host_address(1)] = "drop"
        with socket.create_connection((host_address(1), web.port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            sock.settimeout(10)
            assert sock.recv(100) == b""
        assert [path for _, path in web.arrivals[host_address(1)]] == ["/"]


def test_a_request_counts_as_arrived_when_it_reached_the_host_not_when_a_busy_server_read_it() -> (
    None
):
    """The server's own process is starved (its loop busy 0.8 s) while two requests come in
    0.3 s apart: each is counted at the time it came, not both at the time they were read."""
    with served_hosts(2, 2) as web:
        sockets = [socket.create_connection((host_address(h), web.port)) for h in (0, 1)]
        try:
            assert _block_loop(web, 0.8).wait(10)
            first = time.time()
            sockets[0].sendall(b"GET / HTTP/1.1\r\n\r\n")
            poll(lambda: time.time() - first >= 0.3, timeout=5)
            second = time.time()
            sockets[1].sendall(b"GET /p/1 HTTP/1.1\r\n\r\n")
            assert all(_answer(sock).startswith(b"HTTP/1.1 200") for sock in sockets)
        finally:
            for sock in sockets:
                sock.close()
        (at_first, _), (at_second, _) = (
            web.arrivals[host_address(0)] + web.arrivals[host_address(1)]
        )
        assert first <= at_first < first + 0.1
        assert second <= at_second < second + 0.1
        assert abs((at_second - at_first) - (second - first)) < 0.1


def test_a_client_that_stops_sending_still_gets_its_whole_answer() -> None:
    """A client that half-closes after its request (``nc -N``) reads the whole answer, however
    much is still waiting in the server's buffer."""
    with served_hosts(1, 1) as web:
        web.arrivals["127.0.9.9"] = [(float(n), f"/p/{n}") for n in range(300_000)]
        with socket.create_connection((host_address(0), web.port)) as sock:
            sock.sendall(b"GET /__arrivals HTTP/1.1\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := sock.recv(1 << 20):
                data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    assert length > 5_000_000
    assert len(body) == length


def test_out_of_descriptors_the_server_rests_instead_of_spinning() -> None:
    """With more clients than file descriptors, the server waits for descriptors to free up
    (using next to no CPU meanwhile) and then serves the clients left waiting."""
    limit = (64, 64)
    server = subprocess.Popen(
        [sys.executable, "-m", "sandbox.hosts", "--hosts", "1", "--pages", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limit),
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        clients = [socket.create_connection((host_address(0), port)) for _ in range(100)]
        before = _cpu_seconds(server.pid)
        start = time.monotonic()
        poll(lambda: time.monotonic() - start >= 2.0, timeout=10)
        assert _cpu_seconds(server.pid) - before < 0.5
        for client in clients[:60]:
            client.close()
        last = clients[-1]
        last.settimeout(20)
        assert _get(last, "/").startswith(b"HTTP/1.1 200 OK")
        for client in clients[60:]:
            client.close()
    finally:
        server.kill()
        server.wait()
