"""Reading settings once, with errors that name the setting."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def setting_int(settings: BaseSettings, name: str, minimum: int, maximum: int | None = None) -> int:
    """An integer setting within bounds, or NotConfigured naming it."""
    raw = settings.get(name)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise NotConfigured(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise NotConfigured(f"{name} must be {bounds}, got {value}")
    return value


def validate_base_url(settings: BaseSettings, name: str) -> str:
    """An http(s) scheme-and-host setting without a trailing slash."""
    raw = str(settings.get(name) or "")
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise NotConfigured(f"{name} must be an http(s) URL such as https://host, got {raw!r}")
    return raw.rstrip("/")


def mask_uri(uri: str) -> str:
    """The URI with any password replaced by ***, safe to log."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
