"""A static web of many hosts for benchmarks, served from memory by a minimal HTTP/1.1 server.

Hosts ``site<h>.test`` (h < HOSTS) on one loopback port, told apart by the Host header (crawls
resolve ``*.test`` to 127.0.0.1: crawler.links.resolver.MappedResolver). Every host has PAGES
HTML pages: ``/`` and ``/p/<k>`` (0 < k < PAGES) in a tree of BRANCHES children per page (so
depth <= 3 for up to 400 pages a host), each also linking its home, three seeded pseudo-random
pages of its host (duplicates for the dupefilter) and one page of another host; ``/robots.txt``
(``Disallow: /private/``); anything else a 404. Every answer is rendered once, at start.

Run as ``python bench/_static_web.py --port P --hosts H --pages N`` (SO_REUSEPORT: start several
processes on one port to spread the load).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._graph_site import (  # noqa: E402
    PageProtocol,
    http_response,
    serve_forever,
)
from devtools.services import ServerProcess, free_port, start_server  # noqa: E402

SUFFIX = ".test"
BRANCHES = 7
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
RESOLVE = {"test": "127.0.0.1"}


def page_path(k: int) -> str:
    return "/" if k == 0 else f"/p/{k}"


def page_links(host: int, k: int, hosts: int, pages: int, port: int, seed: int) -> list[str]:
    """Links of page ``k`` of ``host``: its children, its home, three seeded pages of its host
    and one page of another host (absolute)."""
    rng = random.Random((seed * 1_000_003 + host) * 100_003 + k)
    children = [c for c in range(BRANCHES * k + 1, BRANCHES * k + BRANCHES + 1) if c < pages]
    own = [*children, 0, *(rng.randrange(pages) for _ in range(3))]
    other = rng.randrange(hosts)
    return [page_path(c) for c in own] + [
        f"http://site{other}{SUFFIX}:{port}{page_path(rng.randrange(pages))}"
    ]


def render_page(host: int, k: int, hosts: int, pages: int, port: int, seed: int) -> bytes:
    """The whole HTTP/1.1 answer for page ``k`` of ``host`` (about 1.5 KB of HTML)."""
    title = f"Page {k} of site{host}"
    anchors = "".join(
        f'<li><a href="{link}">{title} links to {link}</a></li>'
        for link in page_links(host, k, hosts, pages, port, seed)
    )
    text = f"<p>{title}: some words of text, as pages have. " * 6 + "</p>"
    body = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta name="description" content="{title}, a static benchmark page"></head>'
        f"<body><h1>{title}</h1>{text}<ul>{anchors}</ul></body></html>\n"
    )
    return http_response(b"200 OK", body.encode())


def responses(hosts: int, pages: int, port: int, seed: int) -> dict[bytes, bytes]:
    """Every answer, keyed by ``host:port/path`` (lower case) as the request names it."""
    robots = http_response(b"200 OK", ROBOTS).replace(b"text/html", b"text/plain")
    table: dict[bytes, bytes] = {}
    for host in range(hosts):
        name = f"site{host}{SUFFIX}:{port}".encode()
        table[name + b"/robots.txt"] = robots
        for k in range(pages):
            table[name + page_path(k).encode()] = render_page(host, k, hosts, pages, port, seed)
    return table


class StaticWebProtocol(PageProtocol):
    """One server connection: GET only, keep-alive, pipelining, the Host header picks the site."""

    def key(self, head: bytes, path: bytes) -> bytes:
        return _host(head.lower()) + path.split(b"?", 1)[0]


def _host(head: bytes) -> bytes:
    start = head.find(b"\r\nhost:")
    if start < 0:
        return b""
    end = head.find(b"\r\n", start + 7)
    return head[start + 7 : end if end >= 0 else len(head)].strip()


def serve(port: int, hosts: int, pages: int, seed: int) -> None:
    table = responses(hosts, pages, port, seed)
    serve_forever(port, lambda: StaticWebProtocol(table))


def start_static_web(
    hosts: int, pages: int, seed: int, processes: int
) -> tuple[list[ServerProcess], int]:
    """Start ``processes`` servers of the web on one free port; returns them and the port."""
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--port", str(port)]
    command += ["--hosts", str(hosts), "--pages", str(pages), "--seed", str(seed)]
    servers = [start_server("static-web", command, port) for _ in range(processes)]
    if processes > 1:
        time.sleep(1.0)  # the first one listening does not mean all are
    return servers, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, default=400)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    serve(args.port, args.hosts, args.pages, args.seed)


if __name__ == "__main__":
    main()
