"""The domains sandbox: a DNS server and web servers on loopback for a population of fake
domains (sandbox/domains_population.py), so a liveness sweep runs without leaving the machine.

Everything listens on addresses of one random ``127.a.b.0/24`` (so several sandboxes can run
side by side), one address per pair of what a host's HTTP and HTTPS ports do
(sandbox/domains_population.py, ``SIDES``): ``.1`` serves HTTP for every domain that answers
over HTTP (told apart by the Host header), nothing on HTTPS, and DNS over UDP; the others have
the same HTTP server with TLS or plain text on HTTPS (redirects to HTTPS), or
nothing listening (refused), HTTPS only with a self-signed certificate, plain text on the
HTTPS port (broken TLS), or a port that misbehaves below HTTP (sandbox/domains_raw.py: reset,
close, SSH and SMTP banners, a body cut short, a port that drops connections). A domain may be
given more than one address: those of other pairs first (where no connection succeeds), its own
last. The HTTP port and the HTTPS port are the same
on every address, so a crawler reaches them with ``-s DOMAINS_HTTP_PORT=<http_port>
-s DOMAINS_HTTPS_PORT=<https_port> -s DOMAINS_NAMESERVERS=<nameserver>
-s DOMAINS_PRIVATE_ADDRESSES=True`` (loopback addresses are not probed otherwise).

Command line: ``python -m sandbox.domains --count 20000 --seed 1 [--truth FILE]`` prints one
JSON line (nameserver, ports, addresses) once listening, writes the ground truth (domain ->
behaviour, class, code, scheme, entry) to FILE when given, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

from sandbox import domains_raw
from sandbox.dns import Answer, DnsProtocol, start_dns
from sandbox.domains_population import (
    BROKEN_SUBDOMAIN,
    DNS_BEHAVIOURS,
    SIDES,
    WEB,
    FakeDomain,
    build_population,
)
from sandbox.domains_tls import self_signed_context

# Every pair of port behaviours, the web host's first: each gets an address (.1, .2, ...).
PAIRS = (WEB, *sorted(set(SIDES.values())))
# GoDaddy's parking page, on /lander of its parked domains: only its service's script.
GODADDY_LANDER = (
    "<html><head><title>{name}</title></head><body><div id='root'></div><script"
    " src='https://img1.wsimg.com/parking-lander/static/js/main.js'></script></body></html>"
)
# Parking pages as services serve them (one per domain, by its name): the phrase split by
# markup or entities, other wordings, a lander that is only a parking service's script.
PARKED_PAGES = (
    "<html><head><title>{name} is for sale</title></head><body><h1>This domain is for sale!"
    "</h1><p>Buy this domain today. Parked free, courtesy of sedoparking.</p></body></html>",
    "<html><body><h1>This domain is <strong>for sale</strong></h1></body></html>",
    "<html><body><p>This&nbsp;domain&nbsp;may&nbsp;be&nbsp;for&nbsp;sale.</p></body></html>",
    "<html><head><title>{name}</title></head><body><div>The domain name <b>{name}</b> may be"
    " for sale. Click here to inquire about this domain.</div></body></html>",
    "<html><body><h1>{name}</h1>\n<p>is for sale</p><a class='btn'>Make an offer</a></body></html>",
    "<html><head><title>Domain for sale</title></head><body><img src='/sale.png'></body></html>",
    "<html><body><p>This web page is parked <em>FREE</em>, courtesy of <a href='#'>Sandbox"
    " Registrar</a>.</p></body></html>",
    GODADDY_LANDER,
)
# Bodis's parking page, on ww25.<domain> of its parked domains.
BODIS_PAGE = (
    "<html><head><title>{name}</title></head><body><p>Related searches</p>"
    "<a href='https://www.bodis.com/privacy'>Privacy Policy</a></body></html>"
)
# Pages that only send the browser on, by a script or a meta refresh (one per domain, by its
# name), as GoDaddy's parked domains answer "/"; {target} is where.
SCRIPT_REDIRECTS = (
    "<!DOCTYPE html><html><head><script>window.onload=function(){{window.location.href="
    '"{target}"}}</script></head></html>',
    "<script>window.location.replace('{target}')</script>",
    '<html><body><script>location.href = "{target}";</script><noscript>Please enable'
    " JavaScript</noscript></body></html>",
    '<html><head><meta http-equiv="refresh" content="0;url={target}"></head>'
    "<body><p>Redirecting...</p></body></html>",
)
PAGE = "<html><head><title>{title}</title></head><body><p>Welcome to {name}.</p></body></html>"
SHOP = (
    "<html><head><title>{name} cars</title></head><body><h1>Used cars for sale</h1><p>Make an"
    " offer on any car in our yard.</p></body></html>"
)
DEEP_PARKED = (
    "<html><head><title>{title}</title></head><body>{filler}<p>This domain is for sale.</p>"
    "</body></html>"
)
DEEP_OFFSET = 100_000
BIG_PAGE_BYTES, CHUNK = 5_000_000, 65_536
SERVER = "sandbox-domains/1"


def page_title(name: str) -> str:
    """The title of an alive domain's page (what a sweep must store)."""
    return f"{name} home"


class DomainsSandbox:
    """The servers of one population; :meth:`start` and :meth:`stop` on an asyncio loop."""

    def __init__(self, domains: dict[str, FakeDomain], slow_seconds: float = 30.0) -> None:
        self.domains = domains
        self.slow_seconds = slow_seconds
        rng = random.Random()
        self.net = f"127.{rng.randint(100, 250)}.{rng.randint(1, 250)}."
        self.addresses = {pair: f"{self.net}{index}" for index, pair in enumerate(PAIRS, 1)}
        self.web_ip = self.addresses[WEB]
        self.http_port = self.https_port = self.dns_port = 0
        self.dns: DnsProtocol | None = None
        self.requests: Counter[str] = Counter()  # HTTP(S) requests answered, by Host
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server] = []
        self._sockets: list[socket.socket] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="sandbox-domains-")

    @property
    def nameserver(self) -> str:
        return f"{self.web_ip}:{self.dns_port}"

    def describe(self) -> dict[str, Any]:
        return {
            "nameserver": self.nameserver,
            "http_port": self.http_port,
            "https_port": self.https_port,
            "addresses": {f"{http}/{https}": ip for (http, https), ip in self.addresses.items()},
            "domains": len(self.domains),
        }

    def truth(self) -> dict[str, dict[str, Any]]:
        return {name: domain.truth() for name, domain in self.domains.items()}

    def address_of(self, domain: FakeDomain) -> str:
        """The address of the domain's own ports: that of their behaviours."""
        return self.addresses[domain.sides]

    def addresses_of(self, domain: FakeDomain) -> list[str]:
        """The addresses DNS gives the domain, in order: its decoys', then its own."""
        return [*(self.addresses[pair] for pair in domain.decoys), self.address_of(domain)]

    async def start(self) -> None:
        web_hosts = [ip for (http, _), ip in self.addresses.items() if http == "web"]
        self.http_port = await self._serve(self._web_app(), web_hosts, 0)
        context = self_signed_context(Path(self._tmp.name))
        tls_hosts = [ip for (_, https), ip in self.addresses.items() if https == "tls"]
        self.https_port = await self._serve(self._tls_app(), tls_hosts, 0, context)
        truncated = domains_raw.truncated(self._truncated_page)
        for (http, https), ip in self.addresses.items():
            for side, port in ((http, self.http_port), (https, self.https_port)):
                handler = truncated if side == "truncated" else domains_raw.RAW.get(side)
                if handler is not None:
                    self._servers.append(await asyncio.start_server(handler, ip, port))
                elif side == "filtered":
                    self._sockets.extend(domains_raw.filtered(ip, port))
        self.dns, self.dns_port = await start_dns(self.web_ip, 0, self.lookup)

    async def stop(self) -> None:
        if self.dns is not None and self.dns.transport is not None:
            self.dns.transport.close()
        for server in self._servers:
            server.close()
        for sock in self._sockets:
            sock.close()
        for runner in self._runners:
            await runner.cleanup()
        self._tmp.cleanup()

    async def _serve(
        self, app: web.Application, hosts: list[str], port: int, context: Any = None
    ) -> int:
        """Serve ``app`` on ``port`` of each of ``hosts`` (0: a free port, that of the first)."""
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        self._runners.append(runner)
        for host in hosts:
            site = web.TCPSite(runner, host, port, ssl_context=context)
            await site.start()
            port = port or int(runner.addresses[0][1])
        return port

    # --- DNS ---------------------------------------------------------------------------------

    def domain_of(self, host: str) -> FakeDomain | None:
        """The domain ``host`` is one of the names of (FakeDomain.hosts), or None."""
        host = host.lower().rstrip(".")
        domain = self.domains.get(host) or self.domains.get(host.partition(".")[2])
        return domain if domain is not None and host in domain.hosts else None

    def lookup(self, name: str) -> Answer:
        domain = self.domain_of(name)
        if domain is None:
            return Answer("nxdomain")
        if domain.behaviour in DNS_BEHAVIOURS:
            return Answer(domain.behaviour)
        first, *more = self.addresses_of(domain)
        return Answer("address", first, tuple(more))

    # --- HTTP --------------------------------------------------------------------------------

    def _web_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._web)
        return app

    def _tls_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._tls)
        return app

    async def _web(self, request: web.Request) -> web.StreamResponse:
        host = (request.host or "").rsplit(":", 1)[0].lower()
        self.requests[host] += 1
        domain = self.domain_of(host)
        if domain is None:
            return _page(404, "unknown host", host)
        behaviour = domain.behaviour
        if behaviour == "slow":
            await asyncio.sleep(self.slow_seconds)
        if behaviour == "parked":
            return _html(200, parked_page(domain.name))
        if behaviour in ("not_found", "server_error"):
            return _page(domain.code, f"Error {domain.code}", domain.name)
        if behaviour == "redirect_offsite":
            return _redirect(f"http://moved-{domain.name.split('.')[0]}.example/")
        if behaviour == "redirect_www" and not host.startswith("www."):
            return _redirect(f"http://www.{domain.name}:{self.http_port}/")
        if behaviour == "redirect_subdomain" and host == domain.name:
            return _redirect(f"http://en.{domain.name}:{self.http_port}/")
        if behaviour == "parked_subdomain":
            if host == domain.name:
                where = f"http://ww25.{domain.name}:{self.http_port}/?subid1=20240611-0316-4f1c"
                return _redirect(where, 302)
            return _html(200, BODIS_PAGE.format(name=domain.name))
        if behaviour == "redirect_nxdomain":
            return _redirect(f"http://{BROKEN_SUBDOMAIN}.{domain.name}:{self.http_port}/")
        if behaviour in ("redirect_https", "redirect_https_bad"):
            return _redirect(f"https://{domain.name}:{self.https_port}/")
        if behaviour == "redirect_loop":
            return _redirect("/loop" if request.path == "/" else "/", 302)
        if behaviour == "script_parked":
            if request.path == "/lander":
                return _html(200, GODADDY_LANDER.format(name=domain.name))
            return _html(200, script_redirect(domain.name, "/lander"))
        if behaviour == "script_offsite":
            away = f"http://moved-{domain.name.split('.')[0]}.example/"
            return _html(200, SCRIPT_REDIRECTS[-1].format(target=away))
        if behaviour == "big_page":
            return await _big_page(request, domain.name)
        if behaviour == "deep_parked":
            return _html(200, deep_parked_page(domain.name))
        if behaviour == "for_sale_shop":
            return _html(200, SHOP.format(name=domain.name))
        return _page(200, page_title(domain.name), domain.name)

    async def _tls(self, request: web.Request) -> web.StreamResponse:
        host = (request.host or "").rsplit(":", 1)[0].lower()
        self.requests[host] += 1
        domain = self.domain_of(host)
        if domain is None:
            return _page(404, "unknown host", request.host or "")
        return _page(200, page_title(domain.name), domain.name)

    def _truncated_page(self, host: str) -> bytes:
        domain = self.domain_of(host)
        name = domain.name if domain else host
        return PAGE.format(title=page_title(name), name=name).encode()


def parked_page(name: str) -> str:
    """The parking page of ``name`` (one of PARKED_PAGES, by the name)."""
    template = PARKED_PAGES[sum(name.encode()) % len(PARKED_PAGES)]
    return template.format(name=name)


def script_redirect(name: str, target: str) -> str:
    """A page that only sends the browser to ``target`` (one of SCRIPT_REDIRECTS, by name)."""
    template = SCRIPT_REDIRECTS[sum(name.encode()) % len(SCRIPT_REDIRECTS)]
    return template.format(target=target)


def deep_parked_page(name: str) -> str:
    """A page whose parking phrase starts past DEEP_OFFSET bytes."""
    filler = "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>\n"
    count = DEEP_OFFSET // len(filler) + 1
    return DEEP_PARKED.format(title=page_title(name), filler=filler * count)


async def _big_page(request: web.Request, name: str) -> web.StreamResponse:
    """A BIG_PAGE_BYTES page announced in Content-Length, sent until the client goes away."""
    response = web.StreamResponse(status=200, headers={"Server": SERVER})
    response.content_type = "text/html"
    response.content_length = BIG_PAGE_BYTES
    await response.prepare(request)
    head = PAGE.format(title=page_title(name), name=name).encode()
    try:
        for start in range(0, BIG_PAGE_BYTES, CHUNK):
            chunk = (head if start == 0 else b"").ljust(CHUNK, b" ")
            chunk = chunk[: BIG_PAGE_BYTES - start]
            await response.write(chunk)
        await response.write_eof()
    except (OSError, RuntimeError):
        pass  # the client read what it wanted and closed
    return response


def _page(status: int, title: str, name: str) -> web.Response:
    return _html(status, PAGE.format(title=title, name=name))


def _html(status: int, body: str) -> web.Response:
    return web.Response(
        status=status, text=body, content_type="text/html", headers={"Server": SERVER}
    )


def _redirect(location: str, status: int = 301) -> web.Response:
    return web.Response(status=status, headers={"Location": location, "Server": SERVER})


class SandboxThread:
    """A DomainsSandbox on its own loop in a daemon thread (for tests and benchmarks)."""

    def __init__(self, sandbox: DomainsSandbox) -> None:
        self.sandbox = sandbox
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> DomainsSandbox:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.sandbox.start(), self.loop).result(30)
        return self.sandbox

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.sandbox.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.domains", description=__doc__)
    parser.add_argument("--count", type=int, default=20_000, help="fake domains")
    parser.add_argument("--seed", type=int, default=1, help="population seed")
    parser.add_argument("--slow", type=float, default=30.0, help="seconds a slow domain waits")
    parser.add_argument("--truth", help="write the ground truth (JSON) to this file")
    parser.add_argument("--list", help="write the start list (one entry a line) to this file")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    sandbox = DomainsSandbox(build_population(args.count, args.seed), args.slow)
    await sandbox.start()
    if args.truth:
        Path(args.truth).write_text(json.dumps(sandbox.truth()))
    if args.list:
        entries = (domain.entry for domain in sandbox.domains.values())
        Path(args.list).write_text("".join(f"{entry}\n" for entry in entries))
    print(json.dumps(sandbox.describe()), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await sandbox.stop()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
