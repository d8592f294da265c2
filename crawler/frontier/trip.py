"""One round trip of the scheduler to Redis, and the layout of its replies.

A trip sends, on one pipeline and in this order: the outbox (new requests, then the lease and
start-entry updates they allow, see ``outbox.py``), the pop if one is asked for, the ask for
the turns of the hosts whose chains want them (``chains.py``), then the riders waiting
(``riders.py``). Its replies come back in the same order; this module alone knows where each
one is. A trip that fails puts the outbox back and gives the riders their error: nothing
it carried is lost, and the next trip takes it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from crawler.frontier.chains import Credits
from crawler.frontier.queue import Popped, popped
from crawler.frontier.riders import Riders, first_error

if TYPE_CHECKING:
    from crawler.frontier.backoff import RedisBackoff
    from crawler.frontier.options import FrontierSettings
    from crawler.frontier.outbox import Outbox
    from crawler.frontier.queue import Frontier


@dataclass(frozen=True)
class Trip:
    """What a round trip brought back: the pop's leases (None without a pop), the requests it
    wrote and how many of those the fleet's filter had seen, whether one of them could not
    wait for a later pop, and the turns taken ahead for chains."""

    popped: Popped | None = None
    pushed: int = 0
    filtered: int = 0
    eager: bool = False
    turns: int = 0


class RoundTrips:
    """The scheduler's round trips: what each carries, and where each reply is."""

    def __init__(
        self,
        frontier: Frontier,
        outbox: Outbox,
        credits: Credits,
        riders: Riders,
        worker: str,
        config: FrontierSettings,
    ) -> None:
        self.frontier, self.outbox, self.credits, self.riders = frontier, outbox, credits, riders
        self.worker, self.config, self.pacing = worker, config, config.pacing

    def needed(self, pop: bool, everything: bool) -> bool:
        """Whether a trip has anything to carry: the outbox, a pop, a rider due, or (with
        ``everything``) any rider."""
        return bool(self.outbox) or pop or self.riders.due() or (everything and bool(self.riders))

    def go(
        self, pop: bool, backoff: RedisBackoff, outage: Callable[[RedisError], None]
    ) -> Trip | None:
        """One round trip (see the module's text); None when Redis failed it (``outage``
        told, everything it carried kept for the next)."""
        pipe = self.frontier.server.pipeline(transaction=False)
        config = self.config
        sealed = self.outbox.seal(pipe, self.frontier, self.worker, config.lease_seconds)
        if pop:
            args = (config.batch_size, config.lease_seconds, self.worker, self.pacing)
            self.frontier.queue_pop(pipe, *args)
        after = pop or not sealed.pushes
        asked = self.credits.queue_ask(pipe, self.frontier, self.pacing, after)
        own = len(pipe)
        boarded = self.riders.board(pipe)
        try:
            replies = pipe.execute(raise_on_error=False)
        except RedisError as exc:
            boarded.lost(exc)
            error: RedisError | None = exc
        else:
            boarded.arrived(replies)
            error = first_error(replies[:own])
        if error is not None:
            self.outbox.unsent(sealed)
            self.credits.not_given(asked)
            outage(error)
            return None
        backoff.recovered()
        self.outbox.sent()
        turns = 0
        if asked:
            assert self.pacing is not None
            turns = self.credits.given(replies[own - 1], asked, self.pacing.ahead)
        scheduled = sealed.schedule_replies(replies)
        filtered = sum(flag == 0 for batch in scheduled for flag in batch)
        leased = popped(replies[own - 1 - bool(asked)]) if pop else None
        return Trip(leased, len(sealed.pushes), filtered, sealed.eager, turns)
