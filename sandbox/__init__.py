"""A local site imitating the crawler's real targets, including how they ban.

It serves the explore feed API, profile pages and challenge pages from a seeded dataset,
and exposes counters and live configuration under ``/__admin__/``.
"""

from __future__ import annotations

from sandbox.app import build_app
from sandbox.config import ConfigError, SandboxConfig, load_config, merge_config
from sandbox.data import Dataset
from sandbox.seed import build_dataset

__all__ = [
    "ConfigError",
    "Dataset",
    "SandboxConfig",
    "build_app",
    "build_dataset",
    "load_config",
    "merge_config",
]
