"""Looking for MongoDB's return while it is away, without holding up the writer.

Once a batch found MongoDB unavailable (its retries spent on connection errors, or its first
attempt when no server answered at all: ``writes.nothing_reachable``), ``BulkWrites`` marks it
away and spills the later batches at once instead of having each wait out its own
connect timeouts and retries. Meanwhile a ping, in a thread of its own, asks every
PROBE_INTERVAL seconds whether it answers again; the first one that does ends the outage:
batches are written to MongoDB again and the spill file is replayed (``replay.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from pymongo.errors import PyMongoError

if TYPE_CHECKING:
    from pymongo import MongoClient

    from crawler.storage.bulk import BulkWrites

logger = logging.getLogger(__name__)

# Seconds between the end of a ping MongoDB did not answer and the next one.
PROBE_INTERVAL = 1.0


class OutageProbe:
    """Pings ``client`` while ``writes`` holds MongoDB away, and ends the outage once it answers.
    Driven from the reactor (:meth:`look`, called often). Each ping runs in a daemon thread: one
    under way when the worker exits (MongoDB still away, the ping waiting out the connect
    timeout) does not hold the exit up."""

    def __init__(self, client: MongoClient[dict[str, Any]], writes: BulkWrites) -> None:
        self.client = client
        self.writes = writes
        self._ping: asyncio.Future[bool] | None = None
        self._next = 0.0  # monotonic time before which no ping starts

    def look(self) -> None:
        """Start a ping if MongoDB is away, none is under way and the last one is old enough."""
        if not self.writes.away or time.monotonic() < self._next:
            return
        if self._ping is not None and not self._ping.done():
            return
        loop = asyncio.get_running_loop()
        self._ping = ping = loop.create_future()
        ping.add_done_callback(self._answered)
        thread = threading.Thread(
            target=self._answer, args=(loop, ping), name="mongo-probe", daemon=True
        )
        thread.start()

    def _answer(self, loop: asyncio.AbstractEventLoop, ping: asyncio.Future[bool]) -> None:
        """The probe thread: ping, and tell the loop whether MongoDB answered."""
        try:
            self.client.admin.command("ping")
        except PyMongoError:
            answered = False
        else:
            answered = True
        with suppress(RuntimeError):  # the loop is closed: the worker is going
            loop.call_soon_threadsafe(_settle, ping, answered)

    def _answered(self, ping: asyncio.Future[bool]) -> None:
        if ping.cancelled():
            return
        if ping.result():
            self.writes.away = False
            logger.info("MongoDB answers again: batches are written to it, the spill replayed")
        else:
            self._next = time.monotonic() + PROBE_INTERVAL

    def close(self) -> None:
        """Stop looking; a ping under way ends within the connect timeout, unwaited for."""
        if self._ping is not None:
            self._ping.cancel()


def _settle(ping: asyncio.Future[bool], answered: bool) -> None:
    if not ping.done():
        ping.set_result(answered)
