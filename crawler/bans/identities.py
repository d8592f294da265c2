"""The identities a worker can send requests as: local bind addresses and proxies."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

DEFAULT = "default"


@dataclass(frozen=True)
class Identity:
    """A bind address ("bind:127.0.0.2"), a proxy ("proxy:http://host:port") or the default."""

    name: str

    @property
    def bind_address(self) -> str | None:
        return self.name.removeprefix("bind:") if self.name.startswith("bind:") else None

    @property
    def proxy(self) -> str | None:
        return self.name.removeprefix("proxy:") if self.name.startswith("proxy:") else None


class IdentityPool:
    """Round-robin over identities, skipping those cooling down on a domain."""

    def __init__(self, bind_addresses: list[str], proxies: list[str]) -> None:
        names = [f"bind:{a}" for a in bind_addresses] + [f"proxy:{p}" for p in proxies]
        self.identities = [Identity(name) for name in names] or [Identity(DEFAULT)]
        self._turn: Iterator[int] = itertools.cycle(range(len(self.identities)))

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
