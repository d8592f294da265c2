"""The waiting revisits' absences in a row (a page found gone or moved away) on real Redis,
against a model (hypothesis)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.recrawl.store import Absence, Backoff, Revisit, RevisitStore

PAGES = st.sampled_from(["aa", "bb"])
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["add", "absent"]), PAGES, st.booleans()), max_size=12
)
INTERVAL, DUE = 10.0, 5e9


class Model:
    """What the store should hold: each waiting page's due time, and its absences in a row."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.waiting: dict[str, float] = {}
        self.absences: dict[str, int] = {}

    def add(self, page: str, replace: bool) -> None:
        if replace or page not in self.waiting:
            self.waiting[page] = DUE
            self.absences.pop(page, None)

    def absent(self, page: str, final: bool, now: float) -> None:
        if page not in self.waiting:
            return
        times = self.absences.get(page, 0) + 1
        if final or 0 < self.backoff.limit <= times:
            del self.waiting[page]
            self.absences.pop(page, None)
            return
        self.absences[page] = times
        self.waiting[page] = now + min(self.backoff.longest, INTERVAL * 2**times)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPERATIONS, st.integers(0, 3), st.sampled_from([25.0, 1e6]))
def test_absences_back_a_page_off_and_end_it_as_the_model_says(
    redis_client: redis.Redis, operations: list[tuple[str, str, bool]], limit: int, longest: float
) -> None:
    redis_client.delete("{s}:revisit", "{s}:revisit:data", "{s}:revisit:absent")
    store, backoff = RevisitStore(redis_client, "s"), Backoff(longest, limit)
    model = Model(backoff)
    for operation, page, flag in operations:
        if operation == "add":
            store.add([Revisit(page, DUE, "{}", replace=flag)])
            model.add(page, flag)
        else:
            now = time.time()
            store.absent([Absence(page, INTERVAL, final=flag)], backoff)
            model.absent(page, flag, now)
    due = store.due_times()
    assert due.keys() == model.waiting.keys()
    for page, when in model.waiting.items():
        assert due[page] == pytest.approx(when, abs=1.0)
    data: Any = redis_client.hkeys("{s}:revisit:data")
    assert {key.decode() for key in data} == due.keys()
    counts: Any = redis_client.hgetall("{s}:revisit:absent")
    absences = {key.decode(): int(times) for key, times in counts.items()}
    assert absences == model.absences
