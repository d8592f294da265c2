"""The identities a worker can send requests as: local bind addresses and proxies.

An identity is named everywhere (Redis keys, logs, stats, meta) without secrets: ``bind:<address>``
or ``proxy:<host>:<port>`` (``#<hash of the user>``, then ``~<n>``, tell apart proxies of one
host and port). The proxy URL, with its credentials, goes only into the ``proxy`` meta key.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler.meta import IDENTITY_META, PROXY_META
from crawler.uris import DEFAULT_IDENTITY, proxy_names


@dataclass(frozen=True)
class Identity:
    """A bind address, a proxy or the default; ``proxy``, its URL with credentials, is never logged
    nor stored in Redis."""

    name: str
    proxy: str | None = field(default=None, repr=False, compare=False)

    @property
    def bind_address(self) -> str | None:
        return self.name.removeprefix("bind:") if self.name.startswith("bind:") else None

    def apply(self, meta: dict[str, Any]) -> None:
        """Send the request of ``meta`` as this identity (its name, bind address or proxy), no
        longer as the one it names (its bind address or proxy dropped: Scrapy's proxy middleware
        drops the credentials it gave the old proxy)."""
        previous = str(meta.get(IDENTITY_META, ""))
        meta[IDENTITY_META] = self.name
        if self.bind_address:
            meta["bindaddress"] = (self.bind_address, 0)
        elif previous.startswith("bind:"):
            meta.pop("bindaddress", None)
        if self.proxy:
            meta["proxy"] = self.proxy
        elif previous.startswith("proxy:"):
            meta.pop("proxy", None)


class IdentityPool:
    """Round-robin over identities, skipping those cooling down on a domain."""

    def __init__(self, bind_addresses: list[str], proxies: list[str]) -> None:
        binds = [Identity(f"bind:{address}") for address in bind_addresses]
        proxied = [Identity(name, url) for name, url in proxy_names(proxies).items()]
        self.identities = binds + proxied or [Identity(DEFAULT_IDENTITY)]
        self._by_name = {identity.name: identity for identity in self.identities}
        self._turn: Iterator[int] = itertools.cycle(range(len(self.identities)))

    def get(self, name: str) -> Identity | None:
        """The identity of this pool called ``name`` (as kept in request meta), if any."""
        return self._by_name.get(name)

    def keep_or_choose(
        self, meta: Mapping[str, Any], cooling_until: Callable[[Identity], float]
    ) -> Identity | float:
        """The identity ``meta`` names unless it is cooling down, else as :meth:`choose`."""
        identity = self.get(str(meta.get(IDENTITY_META, "")))
        if identity is not None and not cooling_until(identity):
            return identity
        return self.choose(cooling_until)

    def other_than(self, name: str, cooling_until: Callable[[Identity], float]) -> Identity | None:
        """The identity after ``name`` in the pool's order not cooling down, other than
        ``name``; None when every other one cools down."""
        names = [identity.name for identity in self.identities]
        start = names.index(name) if name in names else -1
        for step in range(1, len(names) + 1):
            identity = self.identities[(start + step) % len(names)]
            if identity.name != name and not cooling_until(identity):
                return identity
        return None

    def choose(self, cooling_until: Callable[[Identity], float]) -> Identity | float:
        """The next identity not cooling down, or the earliest end of the cool-downs."""
        earliest = float("inf")
        for _ in self.identities:
            identity = self.identities[next(self._turn)]
            until = cooling_until(identity)
            if not until:
                return identity
            earliest = min(earliest, until)
        return earliest


def without_identity(meta: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A copy of ``meta`` without what the identity it names put there (name, bind address, a proxy
    and its credentials): stored in Redis, it carries no secret and gets an identity afresh."""
    dropped = {key, "bindaddress"}
    if str(meta.get(key, "")).startswith("proxy:"):
        dropped.update(PROXY_META)
    return {name: value for name, value in meta.items() if name not in dropped}
