"""A web of many hosts, each on its own loopback address, that counts every request it receives.

Host ``i`` (``i`` below the host count) is ``http://127.0.<1 + i // 250>.<1 + i % 250>:<port>/``
(up to 250 x 254 hosts), all served from one asyncio loop on one port. Every host has PAGES
small HTML pages, ``/`` and ``/p/<k>``; page ``k`` links ``LOCAL_LINKS`` pages of its host
(``8k + 1`` to ``8k + 8``, so every page is within a few hops of ``/``) and ``FOREIGN_LINKS``
seeded pages of other hosts. ``/robots.txt`` allows everything; anything else is a 404.

The server notes when each request arrived per host address, as the kernel received its
first bytes (Linux's SO_TIMESTAMPNS, wall clock), however late a busy server reads them: that is
where a polite crawler's promise is kept, and where tests and benchmarks count it
(:func:`early_requests`, :func:`busy_hosts`). ``GET /__arrivals`` (on any host) answers them as
JSON, ``{address: [[time, path], ...]}``, and ``GET /__reset`` forgets them; neither is counted.

A host can be made to fail (``HostsWeb.faults``, address -> fault): ``"429"`` or ``"503"`` answers
every page with that status and no Retry-After (``"503:30"``: with ``Retry-After: 30``),
``"robots-503"`` answers its robots.txt 503, ``"robots-drop"`` closes the connection of a
robots.txt request without an answer, ``"drop"`` closes every connection without an answer.
The failed requests are counted too.

A request that carries a ``Depth`` header (a test's crawler adds it: tests/depth_header.py) has
its depth noted beside its arrival too, in ``HostsWeb.depths``: (address, path) -> the depths it
was fetched at, in order of arrival.

Run as ``python -m sandbox.hosts --hosts 400 --pages 25 [--port P]``: it prints the port, then
serves until terminated.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import socket
import struct
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

LOCAL_LINKS = 8
FOREIGN_LINKS = 2
HOSTS_PER_BLOCK = 250
ROBOTS = b"User-agent: *\nDisallow:\n"
Arrivals = dict[str, list[tuple[float, str]]]


def host_address(index: int) -> str:
    """The loopback address of host ``index``."""
    return f"127.0.{1 + index // HOSTS_PER_BLOCK}.{1 + index % HOSTS_PER_BLOCK}"


def page_path(k: int) -> str:
    return "/" if k == 0 else f"/p/{k}"


def page_links(host: int, k: int, hosts: int, pages: int, port: int, seed: int = 0) -> list[str]:
    """The links of page ``k`` of ``host``: paths of its host, then absolute URLs elsewhere."""
    rng = random.Random((seed * 1_000_003 + host) * 100_003 + k)
    local = [page_path((LOCAL_LINKS * k + j) % pages) for j in range(1, LOCAL_LINKS + 1)]
    foreign = []
    for _ in range(FOREIGN_LINKS if hosts > 1 else 0):
        other = (host + 1 + rng.randrange(hosts - 1)) % hosts
        foreign.append(f"http://{host_address(other)}:{port}{page_path(rng.randrange(pages))}")
    return local + foreign


def site_pages(hosts: int, pages: int, port: int) -> set[tuple[str, str]]:
    """Every (address, path) of the web's pages: what a complete crawl fetches."""
    return {(host_address(h), page_path(k)) for h in range(hosts) for k in range(pages)}


def _response(
    status: bytes, body: bytes, content_type: bytes = b"text/html", retry_after: str = ""
) -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type
    if retry_after:
        head += b"\r\nRetry-After: " + retry_after.encode()
    head += b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    return head + body


class HostsWeb:
    """The pages of every host, rendered up front, and the arrivals counted so far."""

    def __init__(self, hosts: int, pages: int, port: int, seed: int = 0) -> None:
        self.hosts, self.pages, self.port = hosts, pages, port
        self.arrivals: Arrivals = defaultdict(list)
        self.depths: dict[tuple[str, str], list[int]] = defaultdict(list)
        self._index = {host_address(h): h for h in range(hosts)}
        self._seed = seed
        self.faults: dict[str, str] = {}
        self.server: Server | None = None  # once served (serve)

    def answer(
        self, address: str, path: str, depth: int | None = None, arrived: float | None = None
    ) -> bytes | None:
        """The bytes to answer ``path`` on host ``address`` with; None: close the connection.
        ``depth``: the request's Depth header, noted when it has one; ``arrived``: when the
        request reached the host (now when not given)."""
        if path == "/__arrivals":
            body = json.dumps(self.arrivals).encode()
            return _response(b"200 OK", body, b"application/json")
        if path == "/__reset":
            self.arrivals.clear()
            return _response(b"200 OK", b"{}", b"application/json")
        self.arrivals[address].append((time.time() if arrived is None else arrived, path))
        if depth is not None:
            self.depths[address, path].append(depth)
        host = self._index.get(address)
        fault = self.faults.get(address, "")
        if fault == "drop":
            return None
        if fault == "robots-drop" and path == "/robots.txt":
            return None
        if fault == "robots-503" and path == "/robots.txt":
            return _response(b"503 Service Unavailable", b"down")
        status, _, wait = fault.partition(":")
        if status == "429" and path != "/robots.txt":
            return _response(b"429 Too Many Requests", b"slow down", retry_after=wait)
        if status == "503" and path != "/robots.txt":
            return _response(b"503 Service Unavailable", b"down", retry_after=wait)
        if path == "/robots.txt":
            return _response(b"200 OK", ROBOTS, b"text/plain")
        k = 0 if path == "/" else _page_number(path)
        if host is None or k is None or not 0 <= k < self.pages:
            return _response(b"404 Not Found", b"not found")
        links = page_links(host, k, self.hosts, self.pages, self.port, self._seed)
        items = "".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
        page = f"<html><head><title>{address} {k}</title></head><body><ul>{items}</ul></body>"
        return _response(b"200 OK", f"<!doctype html>{page}</html>".encode())


def _depth_header(head: bytes) -> int | None:
    """The value of a request head's Depth header, None without one (or not a number)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"depth":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def _page_number(path: str) -> int | None:
    if not path.startswith("/p/"):
        return None
    try:
        return int(path[3:])
    except ValueError:
        return None


# Linux's receive timestamps: the kernel notes when each packet came in (CLOCK_REALTIME).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_STAMP_SPACE = socket.CMSG_SPACE(16)


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    """When the kernel received the bytes a ``recvmsg`` read (SO_TIMESTAMPNS); now without."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return float(seconds + nanoseconds / 1e9)
    return time.time()


class _Connection:
    """One client connection. A request's arrival is when the kernel received its first bytes,
    not when this process got round to reading them: a busy machine (the test's own process, a
    loaded CI) delays the reading, never the time counted."""

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.server, self.sock, self.loop = server, sock, server.loop
        self.address = str(sock.getsockname()[0])
        self.buffer = self.out = b""
        self.started = 0.0  # the kernel's time of the first bytes of the request in the buffer
        self.ending = False  # the client sent all it will: closed once the answers are out
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, _STAMP_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.sock.fileno())
            self.ending = True
            if not self.out:
                self.close()
            return
        if not self.buffer:
            self.started = _kernel_time(ancillary)
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            parts = head.split(b"\r\n", 1)[0].split(b" ")
            path = parts[1].decode("latin-1").split("?")[0] if len(parts) > 1 else "/"
            answer = self.server.web.answer(self.address, path, _depth_header(head), self.started)
            if answer is None:
                self.close()
                return
            self.out += answer
            self._flush()
            if self.sock.fileno() < 0:
                return

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()
            return
        self.out = self.out[sent:]
        if self.out:
            self.loop.add_writer(self.sock.fileno(), self._flush)
        elif self.ending:
            self.close()
        else:
            self.loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.loop.remove_writer(self.sock.fileno())
            self.sock.close()
        self.server.connections.discard(self)


# Connections one wake-up of a listener accepts at most; seconds it rests when accept fails
# (out of file descriptors), rather than spinning on a listener that stays readable.
ACCEPTS_PER_WAKE = 64
ACCEPT_PAUSE = 1.0


class Server:
    """Listens on every host's address at ``web.port`` on the running loop; ``close()`` stops
    listening and drops every connection."""

    def __init__(self, web: HostsWeb, loop: asyncio.AbstractEventLoop) -> None:
        self.web, self.loop = web, loop
        self.connections: set[_Connection] = set()
        self.listeners: list[socket.socket] = []
        try:
            for address in (host_address(h) for h in range(web.hosts)):
                self.listeners.append(self._listen(address))
        except OSError:
            self.close()
            raise

    def _listen(self, address: str) -> socket.socket:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):  # no receive timestamps here: the read's time counts
            listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # accepted ones inherit it
        listener.bind((address, self.web.port))
        listener.listen(1024)
        listener.setblocking(False)
        self.loop.add_reader(listener.fileno(), self._accept, listener)
        return listener

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError:  # out of descriptors: the clients wait in the backlog meanwhile
                self.loop.remove_reader(listener.fileno())
                self.loop.call_later(ACCEPT_PAUSE, self._resume, listener)
                return
            self.connections.add(_Connection(self, sock))

    def _resume(self, listener: socket.socket) -> None:
        if listener.fileno() >= 0:
            self.loop.add_reader(listener.fileno(), self._accept, listener)

    def close(self) -> None:
        for listener in self.listeners:
            if listener.fileno() >= 0:
                self.loop.remove_reader(listener.fileno())
                listener.close()
        for connection in list(self.connections):
            connection.close()


async def serve(web: HostsWeb) -> Server:
    """Listen on every host's address at ``web.port``."""
    web.server = Server(web, asyncio.get_running_loop())
    return web.server


def free_port(hosts: int) -> int:
    """A port free on the first host's address (the others are very likely free too)."""
    with socket.socket() as probe:
        probe.bind((host_address(0), 0))
        return int(probe.getsockname()[1])


# --- what the arrivals say ---------------------------------------------------------------


def early_requests(
    arrivals: Mapping[str, Sequence[Sequence[float | str]]], rate: float
) -> list[tuple[str, float, str]]:
    """Requests that reached their host sooner than 0.9 / ``rate`` seconds after the host's
    previous one: (address, gap seconds, path), smallest gap first."""
    early = []
    least = 0.9 / rate
    for address, seen in arrivals.items():
        times = sorted((float(at), str(path)) for at, path in seen)
        for (before, _), (at, path) in itertools.pairwise(times):
            if at - before < least:
                early.append((address, round(at - before, 4), path))
    return sorted(early, key=lambda row: row[1])


def busy_hosts(
    arrivals: Mapping[str, Sequence[Sequence[float | str]]], start: float, end: float
) -> set[str]:
    """The hosts that received a request between ``start`` and ``end`` (wall clock)."""
    return {
        address
        for address, seen in arrivals.items()
        if any(start <= float(at) < end for at, _ in seen)
    }


def fetched_pages(arrivals: Mapping[str, Iterable[Sequence[float | str]]]) -> set[tuple[str, str]]:
    return {(address, str(path)) for address, seen in arrivals.items() for _, path in seen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=400)
    parser.add_argument("--pages", type=int, default=25)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    if not 0 < options.hosts <= HOSTS_PER_BLOCK * 254:
        parser.error(f"--hosts must be 1..{HOSTS_PER_BLOCK * 254}")
    port = options.port or free_port(options.hosts)
    web = HostsWeb(options.hosts, options.pages, port, options.seed)

    async def run() -> None:
        await serve(web)
        print(port, flush=True)
        await asyncio.Event().wait()  # until terminated

    asyncio.run(run())


if __name__ == "__main__":
    main()
