"""Revisits waiting in Redis (docs/frontier.md, Redis keys): one per page at most, writing one
again replaces it. A due revisit is *claimed* before it is handed to the frontier: its due time
moves a lease ahead, and it is removed only once the frontier holds its request, so a worker
that dies in between leaves it to come due again for another worker. A revisit that did not
find its page at its address (an :class:`Absence`) leaves the waiting one's request as it is
and counts the absences in a row beside it: its next due time backs off, or it ends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.connection import reply_text
from crawler.frontier.lua import queue_eval
from crawler.keys import revisit_keys

if TYPE_CHECKING:
    from crawler.connection import RedisClient

# KEYS: revisit, data, absent. ARGV: per revisit 5 values (fingerprint, due, json, mode,
# former): mode "r" replaces a waiting revisit, "n" adds one only where none waits (a page
# fetched outside its revisits keeps the schedule it has); a revisit written ends its page's
# absences in a row, and the revisit it replaces under a former fingerprint ("" for none).
# Returns how many were written.
ADD = """
local written = 0
for a = 1, #ARGV, 5 do
  local fp, due, json, mode, former = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  if mode == 'r' or not redis.call('ZSCORE', KEYS[1], fp) then
    redis.call('ZADD', KEYS[1], due, fp)
    redis.call('HSET', KEYS[2], fp, json)
    redis.call('HDEL', KEYS[3], fp)
    if former ~= '' and former ~= fp then
      redis.call('ZREM', KEYS[1], former)
      redis.call('HDEL', KEYS[2], former)
      redis.call('HDEL', KEYS[3], former)
    end
    written = written + 1
  end
end
return written
"""

# KEYS: revisit, data, absent. ARGV: now, longest wait, absences that end a revisit (0: none
# do), factor, then per absence 4 values (fingerprint, interval, spread, final "1" or "0"). A
# waiting revisit (none: nothing to do) counts one more absence in a row; a final one, or the
# one that reaches the limit, ends it; else it waits interval x factor^absences (at most the
# longest wait) x spread. Returns how many revisits ended.
ABSENT = """
local now, longest, limit, factor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4])
local ended = 0
for a = 5, #ARGV, 4 do
  local fp = ARGV[a]
  if redis.call('ZSCORE', KEYS[1], fp) then
    local times = redis.call('HINCRBY', KEYS[3], fp, 1)
    if ARGV[a + 3] == '1' or (limit > 0 and times >= limit) then
      redis.call('ZREM', KEYS[1], fp)
      redis.call('HDEL', KEYS[2], fp)
      redis.call('HDEL', KEYS[3], fp)
      ended = ended + 1
    else
      local wait = math.min(longest, tonumber(ARGV[a + 1]) * factor ^ times)
      redis.call('ZADD', KEYS[1], tostring(now + wait * tonumber(ARGV[a + 2])), fp)
    end
  end
end
return ended
"""

# KEYS: revisit, data, absent. ARGV: now, count, claim deadline. Claims up to ``count`` due
# revisits: their score becomes the deadline. Returns the earliest due time left ("0" for
# none), then fingerprint, json pairs.
CLAIM = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local result = {'0'}
for _, id in ipairs(ids) do
  local json = redis.call('HGET', KEYS[2], id)
  if json then
    redis.call('ZADD', KEYS[1], ARGV[3], id)
    result[#result + 1] = id
    result[#result + 1] = json
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
  end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then result[1] = first[2] end
return result
"""

# KEYS: revisit, data, absent. ARGV: claim deadline, then pairs (fingerprint, next due or "").
# Of the claimed revisits not written again since they were claimed (their score is still the
# deadline), one with a next due waits again until then, one without is removed. Returns how
# many changed.
COMPLETE = """
local deadline, changed = tonumber(ARGV[1]), 0
for a = 2, #ARGV, 2 do
  local fp, due = ARGV[a], ARGV[a + 1]
  local score = redis.call('ZSCORE', KEYS[1], fp)
  if score and tonumber(score) == deadline then
    if due == '' then
      redis.call('ZREM', KEYS[1], fp)
      redis.call('HDEL', KEYS[2], fp)
      redis.call('HDEL', KEYS[3], fp)
    else
      redis.call('ZADD', KEYS[1], due, fp)
    end
    changed = changed + 1
  end
end
return changed
"""

HOUR = 3600.0


@dataclass(frozen=True)
class Revisit:
    """A page's next visit: its request fingerprint (hex), due time and request JSON;
    ``former``: the fingerprint its revisit waited under, when another (the spider's
    fingerprint changed since it was written), which the new one replaces."""

    fingerprint: str
    due: float
    json: str
    replace: bool = True
    former: str = ""


@dataclass(frozen=True)
class Absence:
    """A revisit that did not find its page at its address (gone, moved): the waiting revisit's
    fingerprint, the interval it waited, the spread (>= 1, jitter) of its next wait, and
    whether its revisits end now (``final``: gone or moved for good)."""

    fingerprint: str
    interval: float
    spread: float = 1.0
    final: bool = False


@dataclass(frozen=True)
class Backoff:
    """How the waits of a page absent visit after visit grow: ``factor`` per absence in a row,
    up to ``longest`` seconds; ``limit`` absences in a row end its revisits (0: never)."""

    longest: float
    limit: int
    factor: float = 2.0


@dataclass(frozen=True)
class Claim:
    """Revisits claimed until ``deadline``, and when the first left waiting is due (0: none)."""

    deadline: float
    revisits: list[tuple[str, str]]
    next_due: float = 0.0


class RevisitStore:
    """The waiting revisits of one spider."""

    def __init__(self, server: RedisClient, spider: str) -> None:
        self.server = server
        self.keys = revisit_keys(spider)
        self._add = server.register_script(ADD)
        self._absent = server.register_script(ABSENT)
        self._claim = server.register_script(CLAIM)
        self._complete = server.register_script(COMPLETE)

    def add(self, revisits: Sequence[Revisit]) -> int:
        """Write revisits in one round trip; returns how many were written."""
        args = _add_args(revisits)
        return int(self._add(keys=self.keys, args=args)) if args else 0

    def queue_add(self, pipe: Any, revisits: Sequence[Revisit]) -> None:
        """Queue :meth:`add` on the pipeline ``pipe``."""
        args = _add_args(revisits)
        if args:
            queue_eval(pipe, self._add.script, self.keys, args)

    def absent(self, absences: Sequence[Absence], backoff: Backoff) -> int:
        """Count each absence against its waiting revisit (see ABSENT); returns how many ended."""
        args = _absent_args(absences, backoff)
        return int(self._absent(keys=self.keys, args=args)) if absences else 0

    def queue_absent(self, pipe: Any, absences: Sequence[Absence], backoff: Backoff) -> None:
        """Queue :meth:`absent` on the pipeline ``pipe``."""
        if absences:
            queue_eval(pipe, self._absent.script, self.keys, _absent_args(absences, backoff))

    def claim(self, count: int, hold: float, now: float | None = None) -> Claim:
        """Claim up to ``count`` due revisits for ``hold`` seconds."""
        now = time.time() if now is None else now
        deadline = round(now + hold, 3)
        raw = self._claim(keys=self.keys, args=[repr(now), count, repr(deadline)])
        return read_claim(raw, deadline)

    def queue_claim(self, pipe: Any, count: int, hold: float) -> float:
        """Queue :meth:`claim` on ``pipe``; its deadline (:func:`read_claim` reads the reply)."""
        now = time.time()
        deadline = round(now + hold, 3)
        queue_eval(pipe, self._claim.script, self.keys, [repr(now), count, repr(deadline)])
        return deadline

    def complete(self, claim: Claim, next_due: Mapping[str, float] | None = None) -> int:
        """Settle claimed revisits now held by the frontier (unless written again since): one
        in ``next_due`` waits again until then, as a fallback should its visit write no new
        revisit (failed, gone, no items); the others are removed."""
        if not claim.revisits:
            return 0
        return int(self._complete(keys=self.keys, args=_complete_args(claim, next_due)))

    def queue_complete(
        self, pipe: Any, claim: Claim, next_due: Mapping[str, float] | None = None
    ) -> None:
        """Queue :meth:`complete` on the pipeline ``pipe``."""
        if claim.revisits:
            queue_eval(pipe, self._complete.script, self.keys, _complete_args(claim, next_due))

    def counts(self, now: float | None = None) -> dict[str, int]:
        """Waiting revisits due now, within the next hour, and later, in one round trip."""
        now = time.time() if now is None else now
        pipe = self.server.pipeline(transaction=False)
        pipe.zcount(self.keys[0], "-inf", now)
        pipe.zcount(self.keys[0], f"({now!r}", now + HOUR)
        pipe.zcount(self.keys[0], f"({now + HOUR!r}", "+inf")
        names = ("due", "next_hour", "later")
        return dict(zip(names, (int(value) for value in pipe.execute()), strict=True))

    def due_times(self) -> dict[str, float]:
        """Every waiting revisit's due time by fingerprint (for tests and small spiders)."""
        raw: Any = self.server.zrange(self.keys[0], 0, -1, withscores=True)
        return {reply_text(member): float(score) for member, score in raw}


def queue_due_count(pipe: Any, spider: str, now: float) -> None:
    """Queue on ``pipe`` how many of ``spider``'s waiting revisits are due at ``now`` (one
    reply): what brings a fleet scaled to zero back (crawler/observability/sizing.py)."""
    pipe.zcount(revisit_keys(spider)[0], "-inf", repr(now))


def _add_args(revisits: Sequence[Revisit]) -> list[Any]:
    args: list[Any] = []
    for revisit in revisits:
        mode = "r" if revisit.replace else "n"
        args.extend((revisit.fingerprint, repr(revisit.due), revisit.json, mode, revisit.former))
    return args


def _absent_args(absences: Sequence[Absence], backoff: Backoff) -> list[Any]:
    args: list[Any] = [repr(time.time()), repr(backoff.longest), backoff.limit]
    args.append(repr(backoff.factor))
    for absence in absences:
        final = "1" if absence.final else "0"
        args.extend((absence.fingerprint, repr(absence.interval), repr(absence.spread), final))
    return args


def read_claim(raw: Any, deadline: float) -> Claim:
    """A claim's reply read (see CLAIM)."""
    pairs = [(reply_text(raw[i]), reply_text(raw[i + 1])) for i in range(1, len(raw), 2)]
    return Claim(deadline, pairs, float(raw[0]))


def _complete_args(claim: Claim, next_due: Mapping[str, float] | None) -> list[Any]:
    args: list[Any] = [repr(claim.deadline)]
    for fingerprint, _ in claim.revisits:
        due = (next_due or {}).get(fingerprint)
        args.extend((fingerprint, "" if due is None else repr(due)))
    return args
