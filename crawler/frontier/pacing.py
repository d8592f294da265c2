"""The fleet's politeness as the frontier takes it, built from the settings with the scheduler.

With one identity (BIND_ADDRESSES and PROXY_POOL give at most one), the frontier's pop plans
each host's turns (``scripts/pace.lua``) and the send gate (``gate.py``) takes the host's token
as each request goes, from the bucket ``scripts/bucket.lua`` keeps. With several identities,
tokens are per identity and the ban middleware takes them (``crawler/bans/waits.py``); with the
ban middleware off, nothing is paced.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from crawler.config import enabled_components, setting
from crawler.uris import identity_names

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

# Seconds of turns one paced pop leases ahead, at most a quarter of FRONTIER_LEASE_SECONDS.
LOOKAHEAD = 10.0
# The class attribute by which a downloader middleware says it keeps the fleet's politeness
# (crawler.middlewares.BanMiddleware): the frontier paces only while one is enabled.
PACES_FLEET = "paces_fleet"


@dataclass(frozen=True)
class Pacing:
    """Politeness taken in the pop (see ``scripts/pace.lua``) and at the send gate
    (``gate.py``): one token bucket per host for
    ``identity``, at ``rate`` requests per second (0: unlimited; ``per_domain`` overrides),
    ``burst`` at once after a quiet spell, rate factor recovering by ``recovery`` per second
    after a ban. A request whose host's turn is over ``horizon`` seconds away stays queued;
    one pop looks at ``budget`` queued requests at most."""

    identity: str
    rate: float
    burst: float
    recovery: float
    per_domain: dict[str, float] = field(default_factory=dict)
    horizon: float = 60.0
    budget: int = 1000
    ahead: float = 0.0  # a turn due within this many seconds is leased at once, held till due

    @property
    def limited(self) -> bool:
        """Whether a rate is set, for every host or some (else only Crawl-delays pace)."""
        return self.rate > 0 or any(rate > 0 for rate in self.per_domain.values())

    def rate_of(self, host: str, crawl_delay: float = 0.0) -> tuple[float, float]:
        """Requests per second and burst for a request of ``host`` spaced by ``crawl_delay``
        (one request per delay, no burst), as the pop reads them (``rate_of`` in pace.lua)."""
        rate = domain_rate(self.per_domain, host, self.rate)
        if crawl_delay > 0:
            return (min(rate, 1 / crawl_delay) if rate > 0 else 1 / crawl_delay), 1.0
        return rate, max(1.0, self.burst)

    def script_args(self, buckets: str) -> list[Any]:
        args: list[Any] = [buckets, self.identity, self.rate, max(1.0, self.burst)]
        args += [self.recovery, self.horizon, self.budget, self.ahead]
        for domain, rate in self.per_domain.items():
            args += [domain, rate]
        return args


NO_PACING: list[Any] = ["", "", 0, 1, 1, 0, 0, 0]


def domain_rate(per_domain: dict[str, float], host: str, default: float) -> float:
    """The rate POLITENESS_DOMAIN_RATES gives ``host``: its own, else its nearest parent
    domain's (``example.com`` covers ``www.example.com``, each host with its own bucket); an
    IP address only its own. Else ``default`` (``domain_rate`` in pace.lua)."""
    if host in per_domain:
        return per_domain[host]
    if ":" not in host and not host.replace(".", "").isdigit():  # not an IP address
        parent = host.partition(".")[2]
        while parent:
            if parent in per_domain:
                return per_domain[parent]
            parent = parent.partition(".")[2]
    return default


@dataclass(frozen=True)
class RatePolicy:
    """Requests per second per (domain, identity); 0 means unlimited."""

    rate: float
    burst: float
    per_domain: dict[str, float] = field(default_factory=dict)
    recovery_seconds: float = 600.0  # from the floor back to the full rate
    floor: float = 0.05

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RatePolicy:
        """POLITENESS_RATE, POLITENESS_BURST, POLITENESS_DOMAIN_RATES, POLITENESS_RECOVERY."""
        return cls(
            rate=setting(settings, "POLITENESS_RATE"),
            burst=setting(settings, "POLITENESS_BURST"),
            per_domain=setting(settings, "POLITENESS_DOMAIN_RATES"),
            recovery_seconds=setting(settings, "POLITENESS_RECOVERY"),
        )

    def rate_for(self, domain: str) -> float:
        return domain_rate(self.per_domain, domain, self.rate)

    def pacing(self, identity: str) -> Pacing:
        """This policy as the frontier's pop takes it for ``identity`` (see ``Pacing``)."""
        return Pacing(
            identity=identity,
            rate=self.rate,
            burst=self.burst,
            recovery=(1 - self.floor) / self.recovery_seconds,
            per_domain=dict(self.per_domain),
        )


def fleet_pacing(settings: BaseSettings, lease_seconds: float) -> Pacing | None:
    """The politeness the frontier's pop and send gate take: POLITENESS_* for the one identity
    of BIND_ADDRESSES and PROXY_POOL; None with several identities (the ban middleware takes
    their tokens) or when no enabled downloader middleware keeps the fleet's politeness."""
    names = identity_names(setting(settings, "BIND_ADDRESSES"), setting(settings, "PROXY_POOL"))
    if len(names) != 1 or not _politeness_kept(settings):
        return None
    pacing = RatePolicy.from_settings(settings).pacing(names[0])
    return replace(pacing, ahead=min(LOOKAHEAD, lease_seconds / 4))


def _politeness_kept(settings: BaseSettings) -> bool:
    middlewares = enabled_components(settings, "DOWNLOADER_MIDDLEWARES")
    return any(getattr(middleware, PACES_FLEET, False) for middleware in middlewares)
