"""A client of a running sandbox: its admin API (``/__admin__/<path>``) and plain GETs.

The tests, the benchmarks and the demo drive the sandbox through it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.request import Request, urlopen


@dataclass(frozen=True)
class SandboxClient:
    """The sandbox at ``url`` (``http://127.0.0.1:<port>``)."""

    url: str

    def admin(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        """GET ``/__admin__/<path>``, or POST ``payload`` as JSON to it; the JSON answer."""
        data = None if payload is None else json.dumps(payload).encode()
        request = Request(
            f"{self.url}/__admin__/{path}", data=data, method="GET" if data is None else "POST"
        )
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path``: the status and the body as text."""
        with urlopen(f"{self.url}{path}", timeout=10) as response:
            return response.status, response.read().decode()
