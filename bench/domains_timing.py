"""Where a domains worker's time goes, measured inside the worker for bench/domains.py.

``python -m bench.domains_timing <core> crawl domains ...`` pins the process to CPU ``core``
(``-1``: no pinning), installs the hooks below and runs ``scrapy``. At exit it writes one line
``domains-timing {json}`` to stderr with, in seconds unless named otherwise:

- ``dns``: from Twisted's HTTP agent asking the reactor's resolver for a host's address to the
  answer (or the failure), per lookup: the resolver's own time plus any wait for a thread of
  the pool (Scrapy's default resolver);
- ``connect``: from the TCP client having the address to the connection being made or failing
  (refused, cancelled at the download timeout), per connection;
- ``open``: from the connection being made to it being closed (TLS handshake, request, answer);
- ``redis``: time the reactor's thread spent in Redis calls (commands, scripts, pipelines),
  which block it;
- ``cpu``: the worker's user + system CPU time; ``cpu_before``: of which before its first DNS
  lookup (start-up: imports, settings, connections); ``wall``: from the hooks' install to exit;
- ``lookups``, ``dns_failed``, ``connections``, ``connect_failed``, ``redis_calls``: counts;
  ``redis/<command>`` and ``redis/<command>+<command>...`` (a pipeline): calls by what they ran.

The hooks wrap the name resolvers the agent's ``HostnameEndpoint`` asks (the spider's
``DomainsResolver``, and Twisted's ``SimpleResolverComplexifier``, through which it reaches an
installed ``IResolverSimple`` such as Scrapy's default), Twisted's TCP client and redis-py's
client: a measurement aid for the benchmark, never loaded by the crawler.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

TOTALS: defaultdict[str, float] = defaultdict(float)
STARTED = time.monotonic()
CONNECT_STARTED, OPENED = "_bench_connect", "_bench_open"


def _wrap(owner: Any, name: str, around: Callable[..., Any]) -> None:
    original = getattr(owner, name)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return around(original, self, *args, **kwargs)

    setattr(owner, name, wrapper)


def _since(client: Any, mark: str) -> float:
    started: float | None = client.__dict__.pop(mark, None)
    return 0.0 if started is None else time.monotonic() - started


class _TimedReceiver:
    """An IResolutionReceiver that notes how long its lookup took."""

    def __init__(self, receiver: Any) -> None:
        if "cpu_before" not in TOTALS:
            TOTALS["cpu_before"] = _cpu()
        self.receiver = receiver
        self.started = time.monotonic()
        self.resolved = False

    def resolutionBegan(self, resolution: Any) -> None:
        self.receiver.resolutionBegan(resolution)

    def addressResolved(self, address: Any) -> None:
        self.resolved = True
        self.receiver.addressResolved(address)

    def resolutionComplete(self) -> None:
        TOTALS["dns"] += time.monotonic() - self.started
        TOTALS["lookups"] += 1
        TOTALS["dns_failed"] += 0 if self.resolved else 1
        self.receiver.resolutionComplete()


def _lookup(
    original: Callable[..., Any], adapter: Any, receiver: Any, *args: Any, **kwargs: Any
) -> Any:
    return original(adapter, _TimedReceiver(receiver), *args, **kwargs)


def _address(original: Callable[..., Any], client: Any, address: Any) -> Any:
    client.__dict__[CONNECT_STARTED] = time.monotonic()
    return original(client, address)


def _connected(original: Callable[..., Any], client: Any) -> Any:
    TOTALS["connect"] += _since(client, CONNECT_STARTED)
    TOTALS["connections"] += 1
    client.__dict__[OPENED] = time.monotonic()
    return original(client)


def _failed(original: Callable[..., Any], client: Any, err: Any) -> Any:
    if CONNECT_STARTED in client.__dict__:
        TOTALS["connect"] += _since(client, CONNECT_STARTED)
        TOTALS["connect_failed"] += 1
    return original(client, err)


def _lost(original: Callable[..., Any], client: Any, reason: Any) -> Any:
    TOTALS["open"] += _since(client, OPENED)
    return original(client, reason)


def _timed_redis(original: Callable[..., Any], client: Any, *args: Any, **kwargs: Any) -> Any:
    # What is called: a command's name, or a pipeline's commands (``redis/<names>``).
    names = args[:1] if args else [c[0][0] for c in getattr(client, "command_stack", [])]
    TOTALS["redis/" + "+".join(sorted({str(name).lower() for name in names}))[:60]] += 1
    started = time.monotonic()
    try:
        return original(client, *args, **kwargs)
    finally:
        TOTALS["redis"] += time.monotonic() - started
        TOTALS["redis_calls"] += 1


def install() -> None:
    import redis.client
    from twisted.internet import _resolver, tcp

    from crawler.domains.resolver import DomainsResolver

    _wrap(DomainsResolver, "resolveHostName", _lookup)
    _wrap(_resolver.SimpleResolverComplexifier, "resolveHostName", _lookup)
    _wrap(tcp.BaseClient, "_setRealAddress", _address)
    _wrap(tcp.BaseClient, "_connectDone", _connected)
    _wrap(tcp.BaseClient, "failIfNotConnected", _failed)
    _wrap(tcp.BaseClient, "connectionLost", _lost)
    _wrap(redis.client.Redis, "execute_command", _timed_redis)
    _wrap(redis.client.Pipeline, "execute", _timed_redis)
    atexit.register(report)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report() -> None:
    figures = {
        **{name: round(value, 3) for name, value in TOTALS.items()},
        "cpu": round(_cpu(), 3),
        "wall": round(time.monotonic() - STARTED, 3),
    }
    print(f"domains-timing {json.dumps(figures)}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
    core = int(argv[0])
    if core >= 0:
        os.sched_setaffinity(0, {core})
    install()
    from scrapy.cmdline import execute

    sys.argv = ["scrapy", *argv[1:]]
    execute()


if __name__ == "__main__":
    main(sys.argv[1:])
