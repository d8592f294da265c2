"""Assembles the sandbox aiohttp application from its parts.

Each page module registers its own routes; compression (on by default, as on real targets)
wraps everything, then the traffic counter, and the anti-bot guard wraps the target routes.
"""

from __future__ import annotations

from aiohttp import web

from sandbox.admin import AdminApi
from sandbox.antibot import AntiBot
from sandbox.bans import ChallengePages
from sandbox.churn import Churn
from sandbox.compression import compression_middleware
from sandbox.config import SandboxConfig
from sandbox.data import DEFAULT_SEED, Dataset
from sandbox.explore import ExploreApi
from sandbox.graph import GraphPages
from sandbox.hostile import HostilePages
from sandbox.maps import MapsPages
from sandbox.profiles import ProfilePages
from sandbox.seed import build_dataset
from sandbox.stats import TrafficStats, traffic_middleware
from sandbox.web import WebPages


def build_app(
    config: SandboxConfig | None = None,
    dataset: Dataset | None = None,
    seed: int = DEFAULT_SEED,
) -> web.Application:
    """Return the sandbox application; ``dataset`` defaults to the one built from ``seed``."""
    config = config or SandboxConfig()
    dataset = dataset or build_dataset(seed)
    stats = TrafficStats()
    antibot = AntiBot(config, stats)
    # The generated web of many sites (sandbox/web.py) answers requests whose Host header is
    # one of its sites, before the target's routes, counters and anti-bot guard.
    sites = WebPages()
    # The site a test writes page by page (sandbox/graph.py), answered the same way.
    graph = GraphPages()
    churn = Churn()
    middlewares = [
        compression_middleware(lambda: antibot.config.compression),
        sites.middleware(),
        graph.middleware(),
        traffic_middleware(stats),
        antibot.middleware(),
    ]
    app = web.Application(middlewares=middlewares)
    explore = ExploreApi(
        dataset, lambda: antibot.config.feed_mode, lambda: antibot.config.counts_mode
    )
    maps = MapsPages(overlap=lambda: antibot.config.maps_overlap)

    def reset_pages() -> None:
        explore.reset()
        maps.reset()

    for part in (
        explore,
        ProfilePages(dataset, churn, lambda: antibot.config.counts_mode),
        churn,
        maps,
        ChallengePages(),
        HostilePages(),
        AdminApi(antibot, stats, dataset, reset_pages),
        sites,
        graph,
    ):
        part.register(app.router)
    return app
