"""``scrapy frontier SPIDER unban DOMAIN`` and ``unban --identity NAME [DOMAIN]``: lift what
holds a host back (its cool-downs, the circuit breaker's block and marks), or what holds one
identity (a bind address or proxy) back on a host or on every host, for the whole fleet, and
make the delayed requests that waited for it due at once."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import UsageError

from crawler.bans.breaker import (
    EVERY_HOST,
    MARKS,
    lift_block,
    lift_identity_block,
    mark_scope,
    site_of_url,
)
from crawler.bans.politeness import (
    Cooldown,
    active_cooldowns,
    lift_cooldowns,
    lift_identity_cooldowns,
)
from crawler.uris import site_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from crawler.connection import RedisClient
    from crawler.frontier.queue import Frontier

# A request sent back while every identity cooled down there is due up to this many seconds
# after the earliest of their ends (BanMiddleware's jitter).
SENT_BACK_JITTER = 1.0


def unban_domain(frontier: Frontier, domain: str, as_json: bool) -> None:
    """Lift the domain's cool-downs (every identity's) and block; its delayed requests due now."""
    server, spider = frontier.server, frontier.keys.spider
    lifted = lift_cooldowns(server, spider, domain)
    lift_block(server, spider, domain)
    due = frontier.make_due(lambda url, _due: domain in _host_and_site(url), time.time())
    if as_json:
        print(json.dumps({"lifted": [c.to_json() for c in lifted], "made_due": due}))
        return
    for cooldown in lifted:
        print(
            f"lifted {cooldown.domain} via {cooldown.identity or 'every identity'} "
            f"(until {_utc(cooldown.until)} UTC; {cooldown.why or 'no reason recorded'})"
        )
    print(
        f"{len(lifted)} active cool-downs of {domain} lifted for {spider}; "
        f"{due} delayed requests due now"
    )


def _host_and_site(url: str) -> tuple[str, str]:
    """What ``unban`` may name a request's host by: its host name, or its site (the host with
    its port when the URL names one, as ``hosts`` shows a blocked site)."""
    return urlsplit(url).hostname or "", site_of_url(url)


def unban_identity(frontier: Frontier, identity: str, host: str | None, as_json: bool) -> None:
    """Lift ``identity``'s cool-downs and blocks on ``host`` (None: on every host, its own
    included) and start its steps over; the delayed requests that waited for them due now."""
    server, spider = frontier.server, frontier.keys.spider
    lifted = lift_identity_cooldowns(server, spider, identity, host)
    stepped = lift_identity_block(server, spider, identity, host)
    due = frontier.make_due(waited_for(lifted), time.time())
    if as_json:
        cooldowns = [c.to_json() for c in lifted]
        print(json.dumps({"lifted": cooldowns, "steps_reset": stepped, "made_due": due}))
        return
    for cooldown in lifted:
        where = "every host" if cooldown.domain == EVERY_HOST else cooldown.domain
        why = cooldown.why or "no reason recorded"
        print(f"lifted {identity} on {where} (until {_utc(cooldown.until)} UTC; {why})")
    print(
        f"{len(lifted)} active blocks of {identity} on {host or 'every host'} lifted for "
        f"{spider}; {due} delayed requests due now"
    )
    if not lifted and not stepped:
        blocked = blocked_identities(server, spider)
        print(f"identities blocked: {', '.join(blocked) or 'none'}", file=sys.stderr)


def waited_for(lifted: list[Cooldown]) -> Callable[[str, float], bool]:
    """Which delayed requests waited for one of the ``lifted`` blocks: of its host (any, for
    EVERY_HOST's), due within SENT_BACK_JITTER after it ended, when a request sent back while
    every identity cooled down there comes due."""

    def wanted(url: str, due: float) -> bool:
        hosts = {EVERY_HOST, *_host_and_site(url)}
        return any(
            cooldown.domain in hosts and cooldown.until <= due <= cooldown.until + SENT_BACK_JITTER
            for cooldown in lifted
        )

    return wanted


def blocked_identities(server: RedisClient, spider: str) -> list[str]:
    """The identities with an active block, by name (what ``--identity`` takes)."""
    marks = {mark_scope(mark) for mark in MARKS}
    names = {c.identity for c in active_cooldowns(server, spider) if c.identity not in marks}
    return sorted(name for name in names if name)


def identity_name(raw: str) -> str:
    """An identity as bans name it (``bind:ADDRESS``, ``proxy:HOST:PORT``, ``default``); a
    mark (``!host_unreachable``) is none: ``unban HOST`` and ``requeue`` lift those."""
    name = raw.strip()
    if not name or "|" in name or name.startswith("!") or not name.isprintable():
        raise UsageError(
            f"--identity: {raw!r} is no identity name (bind:ADDRESS, proxy:HOST:PORT or "
            "default, as `scrapy frontier SPIDER hosts` shows them)"
        )
    return name


def unban_host(raw: str) -> str:
    """The host ``unban`` names, as ``hosts`` shows it and the crawl keys it (``site_name``):
    ``HOST`` (every port of it) or ``HOST:PORT``, an IDN in its ASCII form; a URL names its
    host (and its port, when not the scheme's)."""
    try:
        return site_name(raw)
    except ValueError:  # idna's and urlsplit's messages say nothing an operator can act on
        raise UsageError(
            f"unban: {raw!r} is not a host name: give HOST, HOST:PORT or a URL, as "
            "`scrapy frontier SPIDER hosts` shows it"
        ) from None


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
