"""Looking for MongoDB's return while it is away, without holding up the writer.

Once a batch found MongoDB unavailable (its retries spent on connection errors), ``BulkWrites``
marks it away and spills the later batches at once instead of having each wait out its own
connect timeouts and retries. Meanwhile a ping, in a thread of its own, asks every
PROBE_INTERVAL seconds whether it answers again; the first one that does ends the outage:
batches are written to MongoDB again and the spill file is replayed (``replay.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
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
    Driven from the reactor (:meth:`look`, called often); the ping runs in its own thread."""

    def __init__(self, client: MongoClient[dict[str, Any]], writes: BulkWrites) -> None:
        self.client = client
        self.writes = writes
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongo-probe")
        self._ping: asyncio.Task[None] | None = None
        self._next = 0.0  # monotonic time before which no ping starts

    def look(self) -> None:
        """Start a ping if MongoDB is away, none is under way and the last one is old enough."""
        if not self.writes.away or time.monotonic() < self._next:
            return
        if self._ping is None or self._ping.done():
            self._ping = asyncio.create_task(self._probe())

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        answered = await loop.run_in_executor(self._thread, self._answers)
        if answered:
            self.writes.away = False
            logger.info("MongoDB answers again: batches are written to it, the spill replayed")
        else:
            self._next = time.monotonic() + PROBE_INTERVAL

    def _answers(self) -> bool:
        try:
            self.client.admin.command("ping")
        except PyMongoError:
            return False
        return True

    def close(self) -> None:
        """Stop pinging; a ping under way ends within the connect timeout, unwaited for."""
        if self._ping is not None:
            self._ping.cancel()
        self._thread.shutdown(wait=False, cancel_futures=True)
