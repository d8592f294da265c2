"""The domains sandbox's population: a seeded list of fake domains, each with a behaviour, and
what a sweep must find for each (the ground truth).

Behaviours and the class and code the domains spider must give them:

==================  ================  =====  =================================================
behaviour           class             code   how the sandbox behaves
==================  ================  =====  =================================================
alive               alive             200    a page with a title
parked              parked            200    a page with a parking signature
not_found           http_error        404    404
server_error        http_error        5xx    500, 502 or 503
slow                timeout           0      answers long after the download timeout
refused             refused           0      an address where nothing listens
tls_only            alive (https)     200    nothing on HTTP; HTTPS with a self-signed cert
tls_broken          tls_error         0      nothing on HTTP; the HTTPS port speaks plain text
redirect_offsite    redirect_offsite  301    301 to another domain
redirect_www        alive             200    301 to ``www.<domain>``, which answers 200
nxdomain            dns_not_found     1000   NXDOMAIN
no_address          dns_not_found     1000   the name exists without an A record
servfail            dns_error         1000   SERVFAIL
silent              dns_error         1000   the DNS server never answers
==================  ================  =====  =================================================

Some list entries are given in another spelling of their domain (``www.``, upper case, a URL):
the spider must store them under the domain's name.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

SUFFIX = ".test"
# behaviour -> (class, code); server_error's code is drawn per domain.
EXPECTED: dict[str, tuple[str, int]] = {
    "alive": ("alive", 200),
    "parked": ("parked", 200),
    "not_found": ("http_error", 404),
    "server_error": ("http_error", 500),
    "slow": ("timeout", 0),
    "refused": ("refused", 0),
    "tls_only": ("alive", 200),
    "tls_broken": ("tls_error", 0),
    "redirect_offsite": ("redirect_offsite", 301),
    "redirect_www": ("alive", 200),
    "nxdomain": ("dns_not_found", 1000),
    "no_address": ("dns_not_found", 1000),
    "servfail": ("dns_error", 1000),
    "silent": ("dns_error", 1000),
}
# Roughly the seed's mix: mostly alive, a fifth without DNS, a few of everything else.
WEIGHTS: dict[str, int] = {
    "alive": 45,
    "parked": 5,
    "not_found": 5,
    "server_error": 4,
    "slow": 2,
    "refused": 5,
    "tls_only": 5,
    "tls_broken": 2,
    "redirect_offsite": 4,
    "redirect_www": 5,
    "nxdomain": 12,
    "no_address": 2,
    "servfail": 2,
    "silent": 2,
}
SERVER_ERRORS = (500, 502, 503)
HTTP_BEHAVIOURS = frozenset(
    {"alive", "parked", "not_found", "server_error", "slow", "redirect_offsite", "redirect_www"}
)
WORDS = ("blue", "river", "stone", "maple", "cloud", "pixel", "north", "ember", "quiet", "delta")


@dataclass(frozen=True)
class FakeDomain:
    name: str
    behaviour: str
    status: str
    code: int
    entry: str  # how the start list spells it

    @property
    def scheme(self) -> str | None:
        """The scheme a sweep must report (None: no answer)."""
        if self.behaviour == "tls_only":
            return "https"
        return "http" if self.behaviour in HTTP_BEHAVIOURS - {"slow"} else None

    def truth(self) -> dict[str, Any]:
        return {**asdict(self), "scheme": self.scheme}


def build_population(count: int, seed: int, every: bool = True) -> dict[str, FakeDomain]:
    """``count`` fake domains by name; with ``every``, the first ones cover every behaviour."""
    rng = random.Random(seed)
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    domains: dict[str, FakeDomain] = {}
    for index in range(count):
        drawn = rng.choices(names, weights)[0]
        behaviour = names[index] if every and index < len(names) else drawn
        name = f"{rng.choice(WORDS)}{index:06d}{SUFFIX}"
        status, code = EXPECTED[behaviour]
        if behaviour == "server_error":
            code = rng.choice(SERVER_ERRORS)
        domains[name] = FakeDomain(name, behaviour, status, code, _spelling(rng, name))
    return domains


def _spelling(rng: random.Random, name: str) -> str:
    roll = rng.random()
    if roll < 0.1:
        return f"www.{name}"
    if roll < 0.15:
        return name.upper()
    if roll < 0.2:
        return f"http://{name}/some/path"
    return name
