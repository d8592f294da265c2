"""Admin endpoints under ``/__admin__/``: counters, reset, live configuration, dataset.

Admin requests are never rate-limited and never counted as traffic.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from aiohttp import web

from sandbox.antibot import AntiBot
from sandbox.config import ConfigError, merge_config
from sandbox.data import Dataset
from sandbox.explore import compact_dumps
from sandbox.stats import TrafficStats

logger = logging.getLogger(__name__)


class AdminApi:
    """Serves the admin endpoints and ``/healthz``."""

    def __init__(
        self,
        antibot: AntiBot,
        stats: TrafficStats,
        dataset: Dataset,
        reset_pages: Callable[[], None] = lambda: None,
    ) -> None:
        self.antibot = antibot
        self.stats = stats
        self.reset_pages = reset_pages
        self._dataset_body = compact_dumps(dataset.to_json())

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the admin routes to ``router``."""
        router.add_get("/__admin__/stats", self.get_stats)
        router.add_post("/__admin__/reset", self.reset)
        router.add_get("/__admin__/config", self.get_config)
        router.add_post("/__admin__/config", self.update_config)
        router.add_get("/__admin__/dataset", self.get_dataset)
        router.add_get("/healthz", self.health)

    async def get_stats(self, request: web.Request) -> web.Response:
        """Answer every traffic counter, ban and fault count, and the request log."""
        return web.json_response(self.stats.snapshot(self.antibot.active_bans()))

    async def reset(self, request: web.Request) -> web.Response:
        """Clear counters, the request log, active bans and the pages' own state (the feed's
        modes)."""
        self.stats.reset()
        self.antibot.reset()
        self.reset_pages()
        logger.info("counters and bans reset")
        return web.json_response({"ok": True})

    async def get_config(self, request: web.Request) -> web.Response:
        """Answer the live configuration."""
        return web.json_response(self.antibot.config.to_dict())

    async def update_config(self, request: web.Request) -> web.Response:
        """Deep-merge a partial JSON object into the configuration and answer the result."""
        try:
            update = json.loads(await request.text())
            config = merge_config(self.antibot.config, update)
        except json.JSONDecodeError as exc:
            return web.json_response({"error": f"invalid JSON: {exc}", "key": None}, status=400)
        except ConfigError as exc:
            return web.json_response({"error": str(exc), "key": exc.key}, status=400)
        self.antibot.configure(config)
        return web.json_response(config.to_dict())

    async def get_dataset(self, request: web.Request) -> web.Response:
        """Answer the whole dataset, so out-of-process tests can compute expectations."""
        return web.Response(text=self._dataset_body, content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        """Answer ``ok`` while the server runs."""
        return web.Response(text="ok")
