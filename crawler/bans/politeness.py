"""Politeness shared by a fleet through Redis (docs/politeness.md): per-domain rates and ban
cool-downs.

* Rate: a token bucket per (domain, identity), the one the frontier's pop and send gate keep
  too (``crawler/frontier/scripts/bucket.lua``); after a ban its rate is halved (down to a
  floor) and recovers linearly, so a fleet backs off together and creeps back.
* Cool-downs: ``{spider}:bans`` maps "<domain>" or "<domain>|<identity>" to an end time (and
  ``:why`` to what started it); every worker reads it at most every ``refresh`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from crawler.connection import reply_text
from crawler.frontier.lua import TAKE
from crawler.frontier.pacing import RatePolicy
from crawler.frontier.riders import Rider, Riders
from crawler.keys import bans_key, rate_key, reasons_key
from crawler.uris import of_site

if TYPE_CHECKING:
    from crawler.connection import RedisClient

# Buckets whose next token time a worker keeps before it forgets those that have passed.
KNOWN_BUCKETS = 10_000
BANS_RIDER = "cool-downs"

# KEYS: bans hash, reasons hash. ARGV: field, until, why, now. Keeps the later end time (and its
# why), and deletes the ended cool-downs among a few sampled ones, so the hashes hold about the
# active cool-downs rather than every domain ever banned.
EXTEND_BAN = r"""
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
local sampled = redis.call('HRANDFIELD', KEYS[1], 20, 'WITHVALUES')
for i = 1, #sampled, 2 do
  if tonumber(sampled[i + 1]) <= tonumber(ARGV[4]) then
    redis.call('HDEL', KEYS[1], sampled[i])
    redis.call('HDEL', KEYS[2], sampled[i])
  end
end
return 1
"""


@dataclass(frozen=True)
class Cooldown:
    """One cool-down as the fleet sees it; ``identity`` is None for the whole domain."""

    domain: str
    identity: str | None
    until: float
    why: str

    @property
    def field(self) -> str:
        """Its field in ``{spider}:bans``: "<domain>" or "<domain>|<identity>"."""
        return self.domain if self.identity is None else f"{self.domain}|{self.identity}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def active_cooldowns(server: RedisClient, spider: str, now: float | None = None) -> list[Cooldown]:
    """The spider's cool-downs that have not ended, soonest end first."""
    pipe = server.pipeline(transaction=False)
    pipe.hgetall(bans_key(spider))
    pipe.hgetall(reasons_key(spider))
    raw_bans, raw_reasons = pipe.execute()
    reasons = {reply_text(name): reply_text(value) for name, value in raw_reasons.items()}
    wall = time.time() if now is None else now
    found = []
    for raw_name, raw_until in raw_bans.items():
        name, until = reply_text(raw_name), float(raw_until)
        if until > wall:
            domain, _, identity = name.partition("|")
            found.append(Cooldown(domain, identity or None, until, reasons.get(name, "")))
    return sorted(found, key=lambda cooldown: (cooldown.until, cooldown.domain))


def lift_cooldowns(server: RedisClient, spider: str, domain: str) -> list[Cooldown]:
    """End every cool-down of ``domain`` (a host name, every port of it too, or ``host:port``:
    ``of_site``) and its identities; the active ones it lifted."""
    return _lift(server, spider, lambda name: of_site(name.partition("|")[0], domain))


def lift_identity_cooldowns(
    server: RedisClient, spider: str, identity: str, host: str | None = None
) -> list[Cooldown]:
    """End the cool-downs of ``identity`` on ``host`` (None: on every host, and its own on the
    pseudo-host "*"); the active ones it lifted."""
    return _lift(server, spider, lambda name: _of_identity(name, identity, host))


def _of_identity(name: str, identity: str, host: str | None) -> bool:
    domain, _, scope = name.partition("|")
    return scope == identity and (host is None or of_site(domain, host))


def _lift(server: RedisClient, spider: str, wanted: Callable[[str], bool]) -> list[Cooldown]:
    """End the cool-downs whose field ``wanted`` accepts; the active ones among them."""
    active = [c for c in active_cooldowns(server, spider) if wanted(c.field)]
    names: Any = server.hkeys(bans_key(spider))
    fields = [name for name in (reply_text(raw) for raw in names) if wanted(name)]
    if fields:
        pipe = server.pipeline(transaction=False)
        pipe.hdel(bans_key(spider), *fields)
        pipe.hdel(reasons_key(spider), *fields)
        pipe.execute()
    return active


class FleetPoliteness:
    """The Redis side of politeness for one spider, with a short-lived local view of bans."""

    def __init__(
        self,
        server: RedisClient,
        spider: str,
        policy: RatePolicy,
        refresh: float = 2.0,
        riders: Riders | None = None,
    ) -> None:
        self.server = server
        self.riders = riders
        self.spider = spider
        self.policy = policy
        self.refresh = refresh
        self._bucket = server.register_script(TAKE)  # scripts/take.lua
        self._extend = server.register_script(EXTEND_BAN)
        self._bans: dict[str, float] = {}
        self._bans_read = 0.0
        # Tokens a call granted beyond the request that asked, per bucket, and until when
        # (monotonic time) they may be spent: one interval, so that tokens kept for later never
        # add to a bucket that filled up meanwhile (the burst holds).
        self._tokens: dict[str, tuple[int, float]] = {}
        # When the bucket said its next token comes (monotonic time), per bucket: requests
        # waiting for it wait that long without asking Redis again, so one round trip serves
        # all of them. Tokens only come with time and other workers only take them, so
        # Redis would not grant one sooner (but for the rate's slow recovery after a ban).
        self._next_token: dict[str, float] = {}
        if riders is not None:
            # The first read rides the frontier's first round trip, not a trip of its own.
            riders.add(BANS_RIDER, Rider(self._queue_bans_read, self._bans_arrived), 0)

    @property
    def bans_key(self) -> str:
        return bans_key(self.spider)

    def _bucket_key(self, domain: str, identity: str) -> str:
        return rate_key(self.spider, domain, identity)

    # --- cool-downs ---------------------------------------------------------------------------

    def cooling_until(self, domain: str, identity: str | None = None) -> float:
        """End of the cool-down of the domain (or of the identity on it); 0 when none. A
        cool-down seen in a view older than ``refresh`` is read again at once (it may have
        been lifted: a request is not held back on an old view)."""
        self._refresh_bans()
        field_name = domain if identity is None else f"{domain}|{identity}"
        until = self._bans.get(field_name, 0.0)
        if until > time.time() and time.monotonic() - self._bans_read >= self.refresh:
            self._read_bans()
            until = self._bans.get(field_name, 0.0)
        return until if until > time.time() else 0.0

    def ban(self, domain: str, identity: str | None, seconds: float, why: str = "") -> float:
        """Start or extend a cool-down for the fleet; its end. ``why`` shows on the fleet page."""
        field_name = domain if identity is None else f"{domain}|{identity}"
        until = time.time() + seconds
        # This worker pauses at once, even if Redis is away and the write has to wait.
        self._bans[field_name] = max(until, self._bans.get(field_name, 0.0))
        keys = [self.bans_key, reasons_key(self.spider)]
        self._extend(keys=keys, args=[field_name, until, why, until - seconds])
        return until

    def note_ban(self, field_name: str, until: float) -> None:
        """A cool-down written by another script (the circuit breaker's): this worker's view of
        it at once. ``field_name`` is "<domain>" or "<domain>|<identity>"."""
        self._bans[field_name] = max(until, self._bans.get(field_name, 0.0))

    def _refresh_bans(self) -> None:
        """Read the cool-downs again once ``refresh`` old: with the next round trip, else now."""
        now = time.monotonic()
        age = now - self._bans_read
        if age < self.refresh:
            return
        riders = self.riders
        if riders is not None and riders.carried and age < 6 * self.refresh:
            if not riders.waiting(BANS_RIDER):
                rider = Rider(self._queue_bans_read, self._bans_arrived)
                riders.add(BANS_RIDER, rider, 4 * self.refresh)
            return
        self._read_bans()

    def _read_bans(self) -> None:
        self._bans_read = time.monotonic()
        raw: Any = self.server.hgetall(self.bans_key)
        self._set_bans(list(raw.items()))

    def _queue_bans_read(self, pipe: Any) -> int:
        pipe.hgetall(self.bans_key)
        return 1

    def _bans_arrived(self, replies: list[Any]) -> None:
        if isinstance(replies[0], dict):
            self._bans_read = time.monotonic()
            self._set_bans(list(replies[0].items()))

    def _set_bans(self, pairs: list[tuple[Any, Any]]) -> None:
        wall = time.time()
        self._bans = {}
        for name, value in pairs:
            if (until := float(value)) > wall:
                self._bans[reply_text(name)] = until

    # --- rate ---------------------------------------------------------------------------------

    def acquire(self, domain: str, identity: str, delay: float = 0.0) -> float:
        """0 when a request may go now, else the seconds until the next token. A ``delay``
        (robots.txt Crawl-delay) caps the rate at one request per ``delay``, no burst, fleet-wide.
        """
        if delay > 0:
            return self._acquire_spaced(domain, identity, delay)
        rate = self.policy.rate_for(domain)
        if rate <= 0:
            return 0.0
        key = self._bucket_key(domain, identity)
        if self._spend_kept(key):
            return 0.0
        if (wait := self._known_wait(key)) > 0:
            return wait
        granted, wait, factor = self._take(key, rate, penalize=False)
        if wait > 0:
            # Wait for one call's worth of tokens: one round trip serves that many requests.
            batch = min(_tokens_per_call(rate), max(1, int(self.policy.burst)))
            wait += (batch - 1) / (rate * factor)
        self._wait_for_token(key, wait)
        if granted:
            if granted > 1:
                self._keep(key, granted - 1, 1 / rate)
            return 0.0
        return wait

    def _keep(self, key: str, tokens: int, seconds: float) -> None:
        """Keep ``tokens`` of the bucket ``key`` to spend within ``seconds`` (forgetting the
        spent-out ones when many buckets are kept)."""
        now = time.monotonic()
        if len(self._tokens) >= KNOWN_BUCKETS:
            self._tokens = {k: kept for k, kept in self._tokens.items() if kept[1] > now}
        self._tokens[key] = (tokens, now + seconds)

    def _spend_kept(self, key: str) -> bool:
        """Spend one of the tokens kept for ``key``, if one is left and still in time."""
        count, until = self._tokens.pop(key, (0, 0.0))
        if count <= 0 or until < time.monotonic():
            return False
        if count > 1:
            self._tokens[key] = (count - 1, until)
        return True

    def _acquire_spaced(self, domain: str, identity: str, delay: float) -> float:
        configured = self.policy.rate_for(domain)
        rate = min(1.0 / delay, configured) if configured > 0 else 1.0 / delay
        key = self._bucket_key(domain, identity)
        if (wait := self._known_wait(key)) > 0:
            return wait
        granted, wait, _ = self._take(key, rate, penalize=False, want=1, burst=1.0)
        self._wait_for_token(key, wait)
        return 0.0 if granted else wait

    def next_token_in(self, domain: str, identity: str) -> float:
        """Seconds until the bucket has a token, as Redis last said (0: maybe now); no I/O."""
        key = self._bucket_key(domain, identity)
        kept, until = self._tokens.get(key, (0, 0.0))
        return 0.0 if kept > 0 and until >= time.monotonic() else self._known_wait(key)

    def interval(self, domain: str, delay: float = 0.0) -> float:
        """Seconds between two tokens at the domain's full rate and ``delay``; 0 if unlimited."""
        rate = self.policy.rate_for(domain)
        if delay > 0:
            return max(delay, 1.0 / rate) if rate > 0 else delay
        return 1.0 / rate if rate > 0 else 0.0

    def _known_wait(self, key: str) -> float:
        """Seconds until the bucket's next token, as it last said; 0 when it may have one."""
        return max(0.0, self._next_token.get(key, 0.0) - time.monotonic())

    def _wait_for_token(self, key: str, wait: float) -> None:
        """Remember when the bucket's next token comes (forgetting past ones when many)."""
        now = time.monotonic()
        if wait <= 0:
            self._next_token.pop(key, None)
            return
        if len(self._next_token) >= KNOWN_BUCKETS:
            self._next_token = {k: t for k, t in self._next_token.items() if t > now}
        self._next_token[key] = now + wait

    def penalize(self, domain: str, identity: str) -> float:
        """Halve the rate of (domain, identity) after a ban; returns the new rate factor."""
        rate = self.policy.rate_for(domain)
        if rate <= 0:
            return 1.0
        key = self._bucket_key(domain, identity)
        self._tokens.pop(key, None)
        self._next_token.pop(key, None)
        return self._take(key, rate, penalize=True, want=0)[2]

    def _take(
        self,
        key: str,
        rate: float,
        penalize: bool,
        want: int | None = None,
        burst: float | None = None,
    ) -> tuple[int, float, float]:
        # Up to half a second's worth of tokens at once (within the bucket): fewer round trips.
        wanted = _tokens_per_call(rate) if want is None else want
        policy = self.policy
        # The cool-downs come along when this worker's view of them is half their refresh old.
        started = time.monotonic()
        with_bans = started - self._bans_read >= self.refresh / 2
        reply = self._bucket(
            keys=[key, self.bans_key] if with_bans else [key],
            args=[
                time.time(),
                rate,
                max(1.0, policy.burst) if burst is None else burst,
                wanted,
                (1 - policy.floor) / policy.recovery_seconds,
                policy.floor,
                int(penalize),
            ],
        )
        granted, wait, factor = reply[:3]
        if with_bans:
            flat = reply[3]
            self._bans_read = started
            self._set_bans(list(zip(flat[::2], flat[1::2], strict=True)))
        return int(granted), float(wait), float(factor)


def _tokens_per_call(rate: float) -> int:
    return max(1, int(rate / 2))
