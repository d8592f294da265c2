"""Anti-bot middleware: rate limits and bans per client address, injected faults and latency.

Only target paths are guarded: the API (``/api/*``), profile pages (``/@*``) and map pages
(``/maps/*``). Admin, health, avatar and challenge pages pass untouched.
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sandbox.bans import BanResponder
from sandbox.config import SandboxConfig
from sandbox.faults import DroppedResponse, FaultInjector
from sandbox.ratelimit import RateLimiter, Verdict
from sandbox.stats import TrafficStats, client_address

logger = logging.getLogger(__name__)

TARGET_PREFIXES = ("/api/", "/@", "/maps/")


def is_target_path(path: str) -> bool:
    """Tell whether ``path`` imitates a real target and so is guarded."""
    return path.startswith(TARGET_PREFIXES)


class AntiBot:
    """Holds the live configuration and the state of bans and faults."""

    def __init__(self, config: SandboxConfig, stats: TrafficStats) -> None:
        self.stats = stats
        self.config = config
        self.limiter = RateLimiter(config.rate_limit)
        self.faults = FaultInjector(config.faults)
        self.responder = BanResponder(config.faults.seed)

    def configure(self, config: SandboxConfig) -> None:
        """Apply a new configuration and restart the random sequences from their seed."""
        self.config = config
        self.limiter.configure(config.rate_limit)
        self.faults.configure(config.faults)
        self.responder.reseed(config.faults.seed)
        logger.info("configuration changed: %s", config.to_dict())

    def reset(self) -> None:
        """Lift every ban, forget every window and restart the random sequences."""
        self.limiter.reset()
        self.faults.reset()
        self.responder.reseed(self.config.faults.seed)

    def active_bans(self) -> list[str]:
        """Clients banned right now."""
        return self.limiter.active_bans()

    def middleware(self) -> Middleware:
        """Return the aiohttp middleware guarding target paths."""

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not is_target_path(request.path):
                return await handler(request)
            return await self.guard_target(request, handler)

        return guard

    async def guard_target(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Apply latency, bans and faults to one target request, then answer it."""
        if self.config.latency_ms:
            await asyncio.sleep(self.config.latency_ms / 1000)
        client = client_address(request)
        verdict = self.limiter.check(client)
        if verdict is not Verdict.ALLOWED:
            return self.ban_response(request, client, verdict)
        plan = self.faults.draw()
        if plan.drop:
            return self.drop(request)
        if plan.slow:
            self.stats.record_fault("slow")
            await asyncio.sleep(self.config.faults.slow_seconds)
        if plan.error:
            return self.error_response()
        return await handler(request)

    def ban_response(self, request: web.Request, client: str, verdict: Verdict) -> web.Response:
        """Count and build the answer to a banned client."""
        if verdict is Verdict.BANNED_NOW:
            self.stats.record_ban_issued()
            logger.info("banned %s for %.1fs", client, self.config.rate_limit.ban_seconds)
        self.stats.record_ban_response(client)
        remaining = self.limiter.ban_remaining(client)
        return self.responder.respond(request, self.config.rate_limit.ban_mode, remaining)

    def drop(self, request: web.Request) -> web.Response:
        """Close the connection so the client gets no answer at all."""
        self.stats.record_fault("drop")
        if request.transport is not None:
            request.transport.close()
        return DroppedResponse()

    def error_response(self) -> web.Response:
        """Answer the configured error status with a short body."""
        self.stats.record_fault("error")
        status = self.config.faults.error_status
        return web.Response(status=status, text=f"{status} {_reason(status)}\n")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
