"""Runtime configuration of the sandbox: anti-bot behaviour and injected faults.

The configuration is a tree of frozen dataclasses. It is read from a JSON file at
startup and changed at runtime by merging partial JSON objects into it; every
change is validated, and errors name the offending key (``rate_limit.ban_mode``).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BAN_MODES: tuple[str, ...] = (
    "403",
    "datadome",
    "cloudflare",
    "captcha_redirect",
    "js_redirect",
    "429",
    "empty",
    "json_error",
    "no_data",
    "soft_block",
    "random",
)
# How the explore API pages (sandbox/explore.py): by cursor; by cursor with every page past the
# first answered once without its items; the recommend feed without a cursor.
FEED_MODES: tuple[str, ...] = ("paged", "hollow_once", "refresh")
# How the feed's videos and the profile pages show their counts (sandbox/data.py): as the real
# API mostly does; every count null; the counts' objects left out.
COUNTS_MODES: tuple[str, ...] = ("shown", "null", "absent")


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or out of range."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class RateLimitConfig:
    """Sliding-window rate limit per client address, and what a banned client gets.

    ``enabled`` (bool, False), ``max_requests`` (int, 40), ``window_seconds`` (float, 60.0),
    ``ban_seconds`` (float, 1800.0), ``ban_mode`` (str, "403"; one of ``BAN_MODES``).
    """

    enabled: bool = False
    max_requests: int = 40
    window_seconds: float = 60.0
    ban_seconds: float = 1800.0
    ban_mode: str = "403"


@dataclass(frozen=True)
class FaultConfig:
    """Random faults applied per request, independent of bans.

    ``error_rate`` (float, 0.0) answers ``error_status`` (int, 503); ``slow_rate`` (float, 0.0)
    delays the answer by ``slow_seconds`` (float, 3.0); ``drop_rate`` (float, 0.0) closes the
    connection without an answer. ``seed`` (int, 1) seeds the random draws.
    """

    error_rate: float = 0.0
    error_status: int = 503
    slow_rate: float = 0.0
    slow_seconds: float = 3.0
    drop_rate: float = 0.0
    seed: int = 1


@dataclass(frozen=True)
class SandboxConfig:
    """The whole configuration; ``latency_ms`` (int, 0) delays every target response;
    ``compression`` (bool, True) gzips answers (or deflates them) for clients that accept it,
    as real targets do; ``feed_mode`` (str, "paged"; one of ``FEED_MODES``) is how the explore
    API pages; ``counts_mode`` (str, "shown"; one of ``COUNTS_MODES``) is how videos and
    profiles show their counts; ``maps_overlap`` (bool, False) has map searches overlap as
    Google's: each also lists the places of the postal codes beside its own, and links each
    place with its own viewport and parameters (sandbox/maps.py)."""

    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    latency_ms: int = 0
    compression: bool = True
    feed_mode: str = "paged"
    counts_mode: str = "shown"
    maps_overlap: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the configuration as a JSON-ready dict."""
        return dataclasses.asdict(self)


def merge_config(config: SandboxConfig, update: object) -> SandboxConfig:
    """Return ``config`` with the partial JSON object ``update`` deep-merged into it."""
    merged: SandboxConfig = _merge_dataclass(config, update, prefix="")
    validate_config(merged)
    return merged


def config_from_dict(data: object) -> SandboxConfig:
    """Build a configuration from a (possibly partial) JSON object over the defaults."""
    return merge_config(SandboxConfig(), data)


def load_config(path: str | Path) -> SandboxConfig:
    """Read a JSON configuration file; missing keys keep their defaults."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError("<file>", f"{path} is not valid JSON: {exc}") from exc
    return config_from_dict(data)


def validate_config(config: SandboxConfig) -> None:
    """Check value ranges that types alone do not express."""
    limit, faults = config.rate_limit, config.faults
    _require(limit.max_requests >= 1, "rate_limit.max_requests", "must be at least 1")
    _require(limit.window_seconds > 0, "rate_limit.window_seconds", "must be positive")
    _require(limit.ban_seconds >= 0, "rate_limit.ban_seconds", "must not be negative")
    _require(limit.ban_mode in BAN_MODES, "rate_limit.ban_mode", f"must be one of {BAN_MODES}")
    for name in ("error_rate", "slow_rate", "drop_rate"):
        rate = getattr(faults, name)
        _require(0.0 <= rate <= 1.0, f"faults.{name}", "must be between 0.0 and 1.0")
    _require(400 <= faults.error_status <= 599, "faults.error_status", "must be 400..599")
    _require(faults.slow_seconds >= 0, "faults.slow_seconds", "must not be negative")
    _require(config.latency_ms >= 0, "latency_ms", "must not be negative")
    _require(config.feed_mode in FEED_MODES, "feed_mode", f"must be one of {FEED_MODES}")
    _require(config.counts_mode in COUNTS_MODES, "counts_mode", f"must be one of {COUNTS_MODES}")


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def _merge_dataclass(current: Any, update: object, prefix: str) -> Any:
    if not isinstance(update, Mapping):
        raise ConfigError(prefix.rstrip(".") or "<root>", "must be a JSON object")
    hints = typing.get_type_hints(type(current))
    known = {f.name for f in dataclasses.fields(current)}
    changes: dict[str, Any] = {}
    for key, value in update.items():
        dotted = f"{prefix}{key}"
        if key not in known:
            raise ConfigError(dotted, "unknown key")
        old = getattr(current, key)
        if dataclasses.is_dataclass(old):
            changes[key] = _merge_dataclass(old, value, prefix=f"{dotted}.")
        else:
            changes[key] = _coerce(dotted, hints[key], value)
    return dataclasses.replace(current, **changes)


def _coerce(key: str, expected: object, value: object) -> object:
    if expected is bool and isinstance(value, bool):
        return value
    if expected is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if expected is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if expected is str and isinstance(value, str):
        return value
    type_name = getattr(expected, "__name__", str(expected))
    raise ConfigError(key, f"must be of type {type_name}, got {type(value).__name__}")
