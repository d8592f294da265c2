"""``scrapy frontier SPIDER hosts``: the hosts a fleet holds back, for an operator to act on.

Each host with an active cool-down (a ban's, or a circuit-breaker block) or mark (unreachable,
robots.txt unavailable) is listed with until when, why and the breaker's step, and the failures
in a row the breaker counts; ``unban HOST`` lifts what it shows. A block of one identity (bind
address or proxy) on a host, or on every host (``*``), is listed with its name and its own
step; ``unban --identity NAME [HOST]`` lifts it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from crawler.bans.breaker import EVERY_HOST, MARKS, breaker_states, mark_scope
from crawler.bans.politeness import active_cooldowns

if TYPE_CHECKING:
    from crawler.connection import RedisClient


def held_hosts(server: RedisClient, spider: str) -> list[dict[str, Any]]:
    """The hosts held back: ``host``, ``until``, ``why``, ``scope`` (the identity, or the mark,
    or None for the whole host), ``step`` and ``failures`` (in a row, by mark); latest end
    first."""
    steps = {state.host: state for state in breaker_states(server, spider)}
    marks = {mark_scope(mark): mark for mark in MARKS}
    held = []
    for cooldown in active_cooldowns(server, spider):
        mark = marks.get(cooldown.identity or "")
        # An identity's block has a step of its own (breaker "host|identity"); a mark, the host's.
        own = cooldown.identity is not None and mark is None
        state = steps.get(cooldown.field if own else cooldown.domain)
        held.append(
            {
                "host": cooldown.domain,
                "until": cooldown.until,
                "why": cooldown.why,
                "scope": mark or cooldown.identity,
                "identity": cooldown.identity if own else None,
                "step": state.level if state else 0,
                "failures": state.failures if state else {},
            }
        )
    return sorted(held, key=lambda host: (-host["until"], host["host"]))


def print_hosts(server: RedisClient, spider: str, as_json: bool) -> None:
    held = held_hosts(server, spider)
    if as_json:
        print(json.dumps({"spider": spider, "hosts": held}))
        return
    for host in held:
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(host["until"]))
        scope = f"identity {host['identity']}" if host["identity"] else host["scope"] or "blocked"
        name = "every host" if host["host"] == EVERY_HOST else host["host"]
        step = f"  step {host['step']}" if host["step"] else ""
        print(f"{name}  {scope} until {until} UTC{step}  ({host['why'] or 'no reason'})")
    print(f"{len(held)} hosts held back for {spider}")
    if any(host["identity"] for host in held):
        print(f"lift an identity's block: scrapy frontier {spider} unban --identity NAME [HOST]")
