"""The domains sandbox's population: a seeded list of fake domains, each with a behaviour, and
what a sweep must find for each (the ground truth).

Behaviours and the class and code the domains spider must give them (``HTTP``/``HTTPS``: what
the host's HTTP and HTTPS ports do, :data:`SIDES`):

==================  ================  =====  =================================================
behaviour           class             code   how the sandbox behaves
==================  ================  =====  =================================================
alive               alive             200    a page with a title
parked              parked            200    a parking page (one of several templates: the
                                             phrase split by markup, entities, other wordings,
                                             a parking service's script)
not_found           http_error        404    404
server_error        http_error        5xx    500, 502 or 503
slow                timeout           0      answers long after the download timeout
refused             refused           0      an address where nothing listens
tls_only            alive (https)     200    nothing on HTTP; HTTPS with a self-signed cert
tls_broken          tls_error         0      nothing on HTTP; the HTTPS port speaks plain text
redirect_offsite    redirect_offsite  301    301 to another domain
redirect_www        alive             200    301 to ``www.<domain>``, which answers 200
redirect_subdomain  alive             200    301 to ``en.<domain>``, which answers 200
parked_subdomain    parked            200    302 to ``ww25.<domain>/?subid1=...``, a parking
                                             service's page (Bodis's parked domains)
redirect_loop       redirect_loop     302    ``/`` redirects to ``/loop``, which redirects to
                                             ``/``
redirect_https      alive (https)     200    HTTP redirects to HTTPS, which answers
redirect_https_bad  redirect_failed   301    HTTP redirects to HTTPS, which speaks plain text
redirect_nxdomain   redirect_failed   301    301 to ``shop.<domain>``, which has no address
                                             (NXDOMAIN)
script_parked       parked            200    ``/`` is a page that only sends the browser to
                                             ``/lander`` (a script or a meta refresh, as
                                             GoDaddy's parked domains), a parking lander
script_offsite      redirect_offsite  200    ``/`` is a page whose meta refresh sends the
                                             browser to another domain
big_page            alive             200    a 5 MB page, announced in Content-Length
truncated           alive             200    Content-Length 20000, 3000 bytes sent, closed
                                             (stored with ``truncated``)
deep_parked         alive             200    a parking phrase past byte 100,000 (not read)
for_sale_shop       alive             200    a shop's "cars for sale ... make an offer"
reset               connection_error  0      HTTP accepts and resets; nothing on HTTPS
close_after_read    connection_error  0      HTTP reads the request and closes; no HTTPS
reset_both          connection_error  0      both ports accept and reset
reset_then_tls      alive (https)     200    HTTP accepts and resets; HTTPS answers
ssh_banner          not_http          0      an SSH server on the HTTP port; no HTTPS
smtp_banner         not_http          0      an SMTP server on the HTTP port; no HTTPS
smtp_tls_broken     not_http          0      SMTP on HTTP; plain text on the HTTPS port
filtered            timeout           0      the HTTP port drops connections (a firewall's
                                             filtered port: connecting times out); nothing
                                             on HTTPS
filtered_then_tls   alive (https)     200    the HTTP port drops connections; HTTPS answers
second_address      alive             200    two A records: the first an address where
                                             nothing listens, the second the web host's
filtered_first      alive             200    two A records: the first an address whose HTTP
                                             port drops connections, the second the web host's
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
    "redirect_subdomain": ("alive", 200),
    "parked_subdomain": ("parked", 200),
    "redirect_loop": ("redirect_loop", 302),
    "redirect_https": ("alive", 200),
    "redirect_https_bad": ("redirect_failed", 301),
    "redirect_nxdomain": ("redirect_failed", 301),
    "script_parked": ("parked", 200),
    "script_offsite": ("redirect_offsite", 200),
    "big_page": ("alive", 200),
    "truncated": ("alive", 200),
    "deep_parked": ("alive", 200),
    "for_sale_shop": ("alive", 200),
    "reset": ("connection_error", 0),
    "close_after_read": ("connection_error", 0),
    "reset_both": ("connection_error", 0),
    "reset_then_tls": ("alive", 200),
    "ssh_banner": ("not_http", 0),
    "smtp_banner": ("not_http", 0),
    "smtp_tls_broken": ("not_http", 0),
    "filtered": ("timeout", 0),
    "filtered_then_tls": ("alive", 200),
    "second_address": ("alive", 200),
    "filtered_first": ("alive", 200),
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
    "redirect_subdomain": 1,
    "parked_subdomain": 1,
    "redirect_loop": 1,
    "redirect_https": 3,
    "redirect_https_bad": 1,
    "redirect_nxdomain": 1,
    "script_parked": 1,
    "script_offsite": 1,
    "big_page": 1,
    "truncated": 1,
    "deep_parked": 1,
    "for_sale_shop": 1,
    "reset": 1,
    "close_after_read": 1,
    "reset_both": 1,
    "reset_then_tls": 1,
    "ssh_banner": 1,
    "smtp_banner": 1,
    "smtp_tls_broken": 1,
    "filtered": 1,
    "filtered_then_tls": 1,
    "second_address": 1,
    "filtered_first": 1,
    "nxdomain": 12,
    "no_address": 2,
    "servfail": 2,
    "silent": 2,
}
SERVER_ERRORS = (500, 502, 503)
# What a host's HTTP and HTTPS ports do (sandbox/domains.py serves each pair on an address of
# its own): "web" and "tls" serve the behaviour's page by the Host header; "none" has nothing
# listening; "reset" accepts and resets; "close" reads the request and closes; "ssh" and
# "smtp" are those servers' banners; "truncated" cuts its answer short; "plain" answers in
# plain text on the HTTPS port; "filtered" never completes a connection (a listener whose
# accept queue is full: the kernel drops the SYNs, as a firewall that drops packets does).
WEB = ("web", "none")
SIDES: dict[str, tuple[str, str]] = {
    "refused": ("none", "none"),
    "tls_only": ("none", "tls"),
    "tls_broken": ("none", "plain"),
    "truncated": ("truncated", "none"),
    "reset": ("reset", "none"),
    "close_after_read": ("close", "none"),
    "reset_both": ("reset", "reset"),
    "reset_then_tls": ("reset", "tls"),
    "ssh_banner": ("ssh", "none"),
    "smtp_banner": ("smtp", "none"),
    "smtp_tls_broken": ("smtp", "plain"),
    "redirect_https": ("web", "tls"),
    "redirect_https_bad": ("web", "plain"),
    "filtered": ("filtered", "none"),
    "filtered_then_tls": ("filtered", "tls"),
}
# Behaviours whose DNS answer gives, before their own address, those of other pairs of port
# behaviours, where no connection to the HTTP port succeeds (refused, or dropped).
DECOYS: dict[str, tuple[tuple[str, str], ...]] = {
    "second_address": (SIDES["refused"],),
    "filtered_first": (SIDES["filtered"],),
}
DNS_BEHAVIOURS = frozenset({"nxdomain", "no_address", "servfail", "silent"})
HTTP_BEHAVIOURS = frozenset(set(EXPECTED) - set(SIDES) - DNS_BEHAVIOURS)
HTTPS_BEHAVIOURS = frozenset({"tls_only", "reset_then_tls", "redirect_https", "filtered_then_tls"})
# Answered over HTTP by a redirect, within the domain, to a URL that fails.
BROKEN_REDIRECTS = frozenset({"redirect_https_bad", "redirect_nxdomain"})
# Pages with a title the sweep must store (page_title in sandbox/domains.py).
TITLED = frozenset(
    {"alive", "tls_only", "redirect_www", "big_page", "truncated", "deep_parked"}
    | {"reset_then_tls", "redirect_https", "redirect_subdomain", "filtered_then_tls"}
    | {"second_address", "filtered_first"}
)
# The name under the domain a behaviour redirects to (besides www., which every domain has).
SUBDOMAINS = {"redirect_subdomain": "en", "parked_subdomain": "ww25"}
# The name under the domain a behaviour redirects to that has no address (not one of its hosts).
BROKEN_SUBDOMAIN = "shop"
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
        if self.behaviour in HTTPS_BEHAVIOURS:
            return "https"
        answered = HTTP_BEHAVIOURS - {"slow"} | {"truncated"} | BROKEN_REDIRECTS
        return "http" if self.behaviour in answered else None

    @property
    def hosts(self) -> list[str]:
        """The names the domain answers under: its own, ``www.`` and the one it redirects to."""
        under = SUBDOMAINS.get(self.behaviour)
        return [self.name, f"www.{self.name}", *([f"{under}.{self.name}"] if under else [])]

    @property
    def sides(self) -> tuple[str, str]:
        """What its HTTP and HTTPS ports do (DNS behaviours: none, never reached)."""
        return SIDES.get(self.behaviour, WEB)

    @property
    def decoys(self) -> tuple[tuple[str, str], ...]:
        """The port behaviours of the addresses its DNS answer gives before its own."""
        return DECOYS.get(self.behaviour, ())

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
        domains[name] = fake_domain(name, behaviour, rng)
    return domains


def fake_domain(name: str, behaviour: str, rng: random.Random) -> FakeDomain:
    """The domain ``name`` behaving so, with its truth (a 5xx code and a spelling drawn)."""
    status, code = EXPECTED[behaviour]
    if behaviour == "server_error":
        code = rng.choice(SERVER_ERRORS)
    return FakeDomain(name, behaviour, status, code, _spelling(rng, name))


def _spelling(rng: random.Random, name: str) -> str:
    roll = rng.random()
    if roll < 0.1:
        return f"www.{name}"
    if roll < 0.15:
        return name.upper()
    if roll < 0.2:
        return f"http://{name}/some/path"
    return name
