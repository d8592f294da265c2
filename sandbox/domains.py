"""The domains sandbox: a DNS server and web servers on loopback for a population of fake
domains (sandbox/domains_population.py), so a liveness sweep runs without leaving the machine.

Everything listens on four addresses of one random ``127.a.b.0/24`` (so several sandboxes
can run side by side): ``.1`` serves HTTP for every domain that answers over HTTP (told apart
by the Host header) and DNS over UDP; ``.2`` has nothing listening (refused); ``.3`` serves
HTTPS only, with a self-signed certificate; ``.4`` speaks plain text on the HTTPS port (a
broken TLS host). The HTTP port and the HTTPS port are the same on every address, so a
crawler reaches them with ``-s DOMAINS_HTTP_PORT=<http_port> -s DOMAINS_HTTPS_PORT=<https_port>
-s DOMAINS_NAMESERVERS=<nameserver>``.

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
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from sandbox.dns import Answer, DnsProtocol, start_dns
from sandbox.domains_population import HTTP_BEHAVIOURS, FakeDomain, build_population
from sandbox.domains_tls import self_signed_context

DNS_ANSWERS = {"nxdomain", "no_address", "servfail", "silent"}
PARKED_PAGE = (
    "<html><head><title>{name} is for sale</title></head><body><h1>This domain is for sale!"
    "</h1><p>Buy this domain today. Parked free, courtesy of sedoparking.</p></body></html>"
)
PAGE = "<html><head><title>{title}</title></head><body><p>Welcome to {name}.</p></body></html>"
SERVER = "sandbox-domains/1"
BROKEN_TLS = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


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
        self.web_ip, self.refused_ip = self.net + "1", self.net + "2"
        self.tls_ip, self.broken_ip = self.net + "3", self.net + "4"
        self.http_port = self.https_port = self.dns_port = 0
        self.dns: DnsProtocol | None = None
        self._runners: list[web.AppRunner] = []
        self._broken: asyncio.Server | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="sandbox-domains-")

    @property
    def nameserver(self) -> str:
        return f"{self.web_ip}:{self.dns_port}"

    def describe(self) -> dict[str, Any]:
        return {
            "nameserver": self.nameserver,
            "http_port": self.http_port,
            "https_port": self.https_port,
            "addresses": {
                "http": self.web_ip,
                "refused": self.refused_ip,
                "https": self.tls_ip,
                "broken_tls": self.broken_ip,
            },
            "domains": len(self.domains),
        }

    def truth(self) -> dict[str, dict[str, Any]]:
        return {name: domain.truth() for name, domain in self.domains.items()}

    async def start(self) -> None:
        self.http_port = await self._serve(self._web_app(), self.web_ip, 0)
        context = self_signed_context(Path(self._tmp.name))
        self.https_port = await self._serve(self._tls_app(), self.tls_ip, 0, context)
        self._broken = await asyncio.start_server(_broken_tls, self.broken_ip, self.https_port)
        self.dns, self.dns_port = await start_dns(self.web_ip, 0, self.lookup)

    async def stop(self) -> None:
        if self.dns is not None and self.dns.transport is not None:
            self.dns.transport.close()
        if self._broken is not None:
            self._broken.close()
        for runner in self._runners:
            await runner.cleanup()
        self._tmp.cleanup()

    async def _serve(self, app: web.Application, host: str, port: int, context: Any = None) -> int:
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, host, port, ssl_context=context)
        await site.start()
        return int(runner.addresses[0][1])

    # --- DNS ---------------------------------------------------------------------------------

    def domain_of(self, host: str) -> FakeDomain | None:
        host = host.lower().rstrip(".")
        return self.domains.get(host) or self.domains.get(host.removeprefix("www."))

    def lookup(self, name: str) -> Answer:
        domain = self.domain_of(name)
        if domain is None:
            return Answer("nxdomain")
        if domain.behaviour in DNS_ANSWERS:
            return Answer(domain.behaviour)
        return Answer("address", self._address(domain.behaviour))

    def _address(self, behaviour: str) -> str:
        if behaviour in HTTP_BEHAVIOURS:
            return self.web_ip
        return {"refused": self.refused_ip, "tls_only": self.tls_ip}.get(behaviour, self.broken_ip)

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
        domain = self.domain_of(host)
        if domain is None:
            return _page(404, "unknown host", host)
        behaviour = domain.behaviour
        if behaviour == "slow":
            await asyncio.sleep(self.slow_seconds)
        if behaviour == "parked":
            return _html(200, PARKED_PAGE.format(name=domain.name))
        if behaviour in ("not_found", "server_error"):
            return _page(domain.code, f"Error {domain.code}", domain.name)
        if behaviour == "redirect_offsite":
            return _redirect(f"http://moved-{domain.name.split('.')[0]}.example/")
        if behaviour == "redirect_www" and not host.startswith("www."):
            return _redirect(f"http://www.{domain.name}:{self.http_port}/")
        return _page(200, page_title(domain.name), domain.name)

    async def _tls(self, request: web.Request) -> web.StreamResponse:
        domain = self.domain_of((request.host or "").rsplit(":", 1)[0])
        if domain is None:
            return _page(404, "unknown host", request.host or "")
        return _page(200, page_title(domain.name), domain.name)


def _page(status: int, title: str, name: str) -> web.Response:
    return _html(status, PAGE.format(title=title, name=name))


def _html(status: int, body: str) -> web.Response:
    return web.Response(
        status=status, text=body, content_type="text/html", headers={"Server": SERVER}
    )


def _redirect(location: str) -> web.Response:
    return web.Response(status=301, headers={"Location": location, "Server": SERVER})


async def _broken_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.read(1024)
        writer.write(BROKEN_TLS)
        await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


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
