"""Traffic counters of the sandbox, as ``/__admin__/stats`` reports them.

API paths are counted with their normalized query (sorted, volatile signing parameters
dropped) so that two fetches of the same feed page share one key; page paths are counted
without their query.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sandbox.faults import DroppedResponse

REQUEST_LOG_SIZE = 10_000
VOLATILE_PARAMS = frozenset({"msToken", "X-Bogus", "_signature", "device_id", "verifyFp"})
STATUS_DROPPED = 0
UNCOUNTED_PREFIXES = ("/__admin__/", "/healthz")


def is_counted(path: str) -> bool:
    """Tell whether requests to ``path`` are traffic (admin and health checks are not)."""
    return not path.startswith(UNCOUNTED_PREFIXES)


def client_address(request: web.Request) -> str:
    """Return the identity of the client: its TCP peer address."""
    return request.remote or "unknown"


def path_key(path: str, query_string: str) -> str:
    """Return the key a request is counted under in ``by_path``."""
    if not path.startswith("/api/"):
        return path
    params = [(k, v) for k, v in parse_qsl(query_string, keep_blank_values=True)]
    kept = sorted((k, v) for k, v in params if k not in VOLATILE_PARAMS)
    return f"{path}?{urlencode(kept)}" if kept else path


class TrafficStats:
    """Counts requests by path, client and status, plus bans and faults."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every counter and the request log."""
        self.total = 0
        self.by_path: Counter[str] = Counter()
        self.by_client: Counter[str] = Counter()
        self.by_client_path: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.by_status: Counter[str] = Counter()
        self.bans_issued = 0
        self.ban_responses: Counter[str] = Counter()
        self.faults: Counter[str] = Counter({"error": 0, "slow": 0, "drop": 0})
        self.first_seen: dict[str, float] = {}
        self.requests: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_SIZE)

    def record_request(
        self, client: str, key: str, path_qs: str, status: int, arrived: float | None = None
    ) -> None:
        """Count one answered (or dropped, ``status`` 0) request, which reached the sandbox at
        ``arrived`` (Unix time; now when not given)."""
        now = time.time()
        self.total += 1
        self.by_path[key] += 1
        self.by_client[client] += 1
        self.by_client_path[client][key] += 1
        self.by_status[str(status)] += 1
        self.first_seen.setdefault(key, now)
        self.requests.append(
            {
                "t": now,
                "arrived": now if arrived is None else arrived,
                "client": client,
                "path": path_qs,
                "status": status,
            }
        )

    def record_ban_issued(self) -> None:
        """Count a client newly banned."""
        self.bans_issued += 1

    def record_ban_response(self, client: str) -> None:
        """Count one ban response served to ``client``."""
        self.ban_responses[client] += 1

    def record_fault(self, kind: str) -> None:
        """Count one injected fault (``error``, ``slow`` or ``drop``)."""
        self.faults[kind] += 1

    def snapshot(self, active_bans: list[str]) -> dict[str, Any]:
        """Return every counter as one JSON-ready document."""
        return {
            "total": self.total,
            "by_path": dict(self.by_path),
            "by_client": dict(self.by_client),
            "by_client_path": {ip: dict(paths) for ip, paths in self.by_client_path.items()},
            "by_status": dict(self.by_status),
            "bans": {
                "issued": self.bans_issued,
                "responses": sum(self.ban_responses.values()),
                "active": active_bans,
                "by_client": dict(self.ban_responses),
            },
            "faults": dict(self.faults),
            "first_seen": dict(self.first_seen),
            "requests": list(self.requests),
        }


def traffic_middleware(stats: TrafficStats) -> Middleware:
    """Return a middleware recording every counted request with its final status."""

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_counted(request.path):
            return await handler(request)
        client = client_address(request)
        key = path_key(request.path, request.query_string)
        arrived = time.time()  # before the latency and the handler: when the request came
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            stats.record_request(client, key, request.path_qs, exc.status, arrived)
            raise
        status = STATUS_DROPPED if isinstance(response, DroppedResponse) else response.status
        stats.record_request(client, key, request.path_qs, status, arrived)
        return response

    return record
