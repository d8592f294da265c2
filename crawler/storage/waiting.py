"""Spilled items that wait on a machine's disk, told to the fleet through Redis.

A spill file (MONGO_SPILL_DIR) is replayed by its own worker, or, once that worker is gone, by
the next worker of its spider that starts with the same directory: nothing else knows of it.
So each worker records in ``{<spider>}:spilled`` how many items its file holds: a hash whose
fields are ``["<host>", "<path>"]`` (JSON) and values ``{"items": n, "at": <Unix time>}`` (when
the count was last written), written with the heartbeat when the count changed and when the
worker closes. The hash has no TTL: the record outlives its worker, and ``scrapy status``, its
``/metrics`` and the fleet's sizing (one worker wanted while any waits) read it. A worker clears
its entry once its file is replayed whole, and the entry of each dead worker's file it replayed
(by the file's name, whatever host and directory wrote it: a container's new name, its disk the
same; a file copied to another machine).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from crawler.connection import reply_text
from crawler.keys import tagged

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.storage.health import StorageHealth

logger = logging.getLogger(__name__)

# Removes the entries of one spill file (ARGV[1], its name: unique, ``<spider>-<pid>-<random>``),
# whichever host and directory wrote them (a file copied to another machine's and replayed).
_CLEAR_FILE = """
local removed = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local ok, entry = pcall(cjson.decode, field)
  if ok and type(entry) == 'table' and type(entry[2]) == 'string'
      and string.match(entry[2], '[^/]*$') == ARGV[1] then
    removed = removed + redis.call('HDEL', KEYS[1], field)
  end
end
return removed
"""


def spilled_key(spider: str) -> str:
    """The spill files of ``spider`` that hold items, by host and path (see above)."""
    return tagged(spider, "spilled")


@dataclass(frozen=True)
class WaitingSpill:
    """A spill file's items waiting on ``host``, as last written ``at`` (Unix time)."""

    host: str
    path: str
    items: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "path": self.path, "items": self.items, "at": self.at}


def read_waiting(server: RedisClient, spider: str) -> list[WaitingSpill]:
    """The spill files of ``spider`` that hold items, by host and path; an entry that cannot
    be read (written by another tool, damaged) is left out."""
    raw: Any = server.hgetall(spilled_key(spider))
    spills = [_entry(field, value) for field, value in raw.items()]
    return sorted((s for s in spills if s is not None), key=lambda s: (s.host, s.path))


def _entry(field: Any, value: Any) -> WaitingSpill | None:
    try:
        host, path = json.loads(reply_text(field))
        record = json.loads(reply_text(value))
        return WaitingSpill(str(host), str(path), int(record["items"]), float(record["at"]))
    except (ValueError, TypeError, KeyError):
        return None


class SpillRecord:
    """What one worker (on ``host``) last told the fleet of its spill file, and the commands
    that bring the record up to date with its storage's health."""

    def __init__(self, spider: str, host: str) -> None:
        self.key = spilled_key(spider)
        self.host = host
        self._told = 0  # items recorded for the own file
        self._cleared: set[str] = set()  # dead workers' files (names) whose entries are gone
        self._pending: tuple[int, list[str]] | None = None  # queued, not confirmed yet

    def queue(self, pipe: Any, health: StorageHealth | None) -> None:
        """Queue on ``pipe`` what changed since the last write; :meth:`sent` reads its
        replies (the record is then as ``health`` says)."""
        if health is None:
            return
        items, field = health.spilled, json.dumps([self.host, health.path])
        if items != self._told:
            if items:
                record = {"items": items, "at": round(time.time(), 3)}
                pipe.hset(self.key, field, json.dumps(record))
            else:
                pipe.hdel(self.key, field)
        replayed = [name for name in health.replayed if name not in self._cleared]
        for name in replayed:
            pipe.eval(_CLEAR_FILE, 1, self.key, name)
        self._pending = (items, replayed)

    def sent(self, replies: list[Any]) -> None:
        """The replies of the commands :meth:`queue` queued last: written unless one failed."""
        pending, self._pending = self._pending, None
        if pending is not None and not any(isinstance(reply, Exception) for reply in replies):
            self._told = pending[0]
            self._cleared.update(pending[1])

    def write(self, server: RedisClient, health: StorageHealth | None) -> None:
        """Bring the record up to date now (a worker closing); a Redis error is logged."""
        pipe = server.pipeline(transaction=False)
        self.queue(pipe, health)
        try:
            self.sent(pipe.execute(raise_on_error=False))
        except RedisError as exc:
            logger.warning("Could not tell the fleet of the items this worker spilled: %s", exc)
