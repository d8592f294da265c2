"""Profiles whose content changes on a clock, for tests of revisits: hot ones change often,
cold ones rarely.

``POST /__admin__/churn {"hot": 10, "cold": 190, "hot_period": 0.5, "cold_period": 600,
"seed": 7}`` (re)creates them and starts their clock: ``/@churn_hot_<i>`` and
``/@churn_cold_<i>`` are profile pages whose version is ``floor((t - started) / period +
phase)`` (phase seeded in [0, 1)); the version shows as the signature ``version <n>`` and as
the follower count 1000 + n. ``GET /__admin__/churn`` answers the clock, each document's
period, phase, current version, when it took effect and how many times the page was fetched,
so a test can tell, for any moment, which version was live (the change log) and compare it
with what a crawler stored.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from sandbox.data import Author, AuthorStats

FIELDS = {"hot": int, "cold": int, "hot_period": float, "cold_period": float, "seed": int}
MAX_DOCUMENTS = 100_000
MIN_PERIOD = 0.001  # seconds; a shorter one makes versions overflow


class ChurnError(ValueError):
    """A churn configuration that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Document:
    unique_id: str
    period: float
    phase: float

    @property
    def hot(self) -> bool:
        return self.unique_id.startswith("churn_hot_")

    def version(self, elapsed: float) -> int:
        return math.floor(elapsed / self.period + self.phase)

    def changed_at(self, elapsed: float) -> float:
        """Seconds after the start at which the current version took effect."""
        return (self.version(elapsed) - self.phase) * self.period


class Churn:
    """The changing profiles, their clock and their fetch counts."""

    def __init__(self) -> None:
        self.started = time.time()
        self.documents: dict[str, Document] = {}
        self.fetches: Counter[str] = Counter()

    def configure(self, payload: Any) -> None:
        config = _config(payload)
        rng = random.Random(config["seed"])
        documents = [
            Document(f"churn_{kind}_{index}", config[f"{kind}_period"], rng.random())
            for kind in ("hot", "cold")
            for index in range(config[kind])
        ]
        self.documents = {document.unique_id: document for document in documents}
        self.fetches = Counter()
        self.started = time.time()

    def author(self, unique_id: str) -> Author | None:
        """The profile as it is now, counted as a fetch; None for other users."""
        document = self.documents.get(unique_id)
        if document is None:
            return None
        self.fetches[unique_id] += 1
        version = document.version(time.time() - self.started)
        return _author(unique_id, version)

    def snapshot(self) -> dict[str, Any]:
        elapsed = time.time() - self.started
        return {
            "started": self.started,
            "documents": {
                uid: {
                    "hot": document.hot,
                    "period": document.period,
                    "phase": document.phase,
                    "version": document.version(elapsed),
                    "changed_at": self.started + document.changed_at(elapsed),
                    "fetches": self.fetches[uid],
                }
                for uid, document in self.documents.items()
            },
        }

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get("/__admin__/churn", self.get)
        router.add_post("/__admin__/churn", self.post)

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def post(self, request: web.Request) -> web.Response:
        try:
            self.configure(await request.json())
        except (ValueError, ChurnError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(self.snapshot())


def _config(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or set(payload) - set(FIELDS):
        raise ChurnError(f"a JSON object with keys among {sorted(FIELDS)}")
    config: dict[str, Any] = {"hot": 0, "cold": 0, "hot_period": 1.0, "cold_period": 600.0}
    config["seed"] = 7
    for name, value in payload.items():
        kind = FIELDS[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ChurnError(f"{name}: must be a number >= 0")
        if not math.isfinite(value) or value < 0:  # NaN, Infinity: JSON that json.loads takes
            raise ChurnError(f"{name}: must be a number >= 0")
        config[name] = kind(value)
    if config["hot"] + config["cold"] > MAX_DOCUMENTS:
        raise ChurnError(f"hot + cold: at most {MAX_DOCUMENTS}")
    if min(config["hot_period"], config["cold_period"]) < MIN_PERIOD:
        raise ChurnError(f"hot_period and cold_period: must be >= {MIN_PERIOD}")
    return config


def _author(unique_id: str, version: int) -> Author:
    stats = AuthorStats(1000 + version, 10, 500, 500, 5, 20, 2)
    user_id = f"9{zlib.crc32(unique_id.encode()):012d}"
    return replace(
        _BASE,
        id=user_id,
        unique_id=unique_id,
        nickname=unique_id,
        signature=f"version {version}",
        stats=stats,
    )


_BASE = Author(
    id="0",
    unique_id="churn",
    nickname="churn",
    signature="",
    verified=False,
    sec_uid="MS4wLjABAAAAchurn",
    private_account=False,
    region="US",
    avatar_larger="",
    create_time=1_600_000_000,
    stats=AuthorStats(0, 0, 0, 0, 0, 0, 0),
)
