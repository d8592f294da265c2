"""Lua scripts of the frontier: every multi-key change is one atomic script, one round trip.

All keys a script touches share the spider's hash tag, so the scripts run on Redis Cluster.
Queued requests wait in one list per priority (see ``scripts/queue.lua``); a leased or delayed
one has its record in the ``data`` hash under its id, and a leased one its worker in the
``owner`` hash.

The scripts are the ``.lua`` files in ``crawler/frontier/scripts/`` (package data; another
package's own scripts are read from its ``scripts/`` by :func:`read_script`); each opens
with comments saying what it does and its KEYS and ARGV, which are left out of the text sent to
Redis. Shared pieces are prepended here: the duplicate filter (``dupefilter.lua``, for
SCHEDULE) and the queue functions with the keys every frontier script begins with
(``queue.lua``).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from typing import Any


def read_script(name: str, package: str = "crawler.frontier") -> str:
    """``scripts/<name>.lua`` of ``package`` without its opening comment lines: the text Redis
    runs."""
    text = files(package).joinpath("scripts", f"{name}.lua").read_text("utf-8")
    lines = text.split("\n")
    first = next(n for n, line in enumerate(lines) if not line.startswith("--"))
    return "\n".join(lines[first:])


_DUPEFILTER = read_script("dupefilter")
PRELUDE = read_script("queue")
SCHEDULE = _DUPEFILTER + PRELUDE + read_script("schedule")
BUCKET = read_script("bucket")
PACE = read_script("pace")
POP = PRELUDE + BUCKET + PACE + read_script("pop")
CREDIT = PRELUDE + BUCKET + PACE + read_script("credit")
# A host's bucket for requests sent now: the send gate's, the ban middleware's, the domains cap's.
TAKE = BUCKET + read_script("take")
# A request that left later than its token counted: its host's bucket moves to then.
SENT_LATE = BUCKET + read_script("sent_late")
SETTLE = PRELUDE + read_script("settle")
QUEUED = PRELUDE + read_script("queued")
# Of the queued, the requests of paused jobs, parked until they resume.
PARKED = read_script("parked")
POP_START = read_script("pop_start")
# The window of answers of a crawl (crawler/bans/failures.py) or of a job.
ANSWERS = read_script("answers")
# A job's number (crawler/frontier/jobs.py; what an operator does to a job: crawler/control/).
JOB_NUMBER = read_script("job_number")
# A worker's counts and answers of one job since its last tick (its own failure threshold).
JOB_TICK = ANSWERS + read_script("job_tick")
# Not the frontier's: a batch of counts applied once (the fleet's stats, the links ledger).
APPLIED = read_script("applied")
# Not the frontier's: one spider's hand-off to another (crawler/handoff.py), two hash tags.
HAND_OVER = read_script("hand_over")


def queue_eval(
    pipe: Any, script: str | bytes | memoryview, keys: Sequence[Any], args: Sequence[Any]
) -> Any:
    """Queue ``script`` on the pipeline ``pipe`` as EVAL: Redis finds it in its script cache
    by digest, no node can answer NOSCRIPT (after a restart), no SCRIPT EXISTS round trip
    precedes each pipeline as redis-py does for registered scripts, and a cluster pipeline,
    which refuses EVALSHA, routes it by its keys' slot like any other command."""
    return pipe.execute_command("EVAL", script, len(keys), *keys, *args)
