"""The local autoscaler's workers (crawler/fleet/local.py): stopped, and killed when they hang."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from crawler.fleet.autoscaler import Member
from crawler.fleet.local import LocalWorkers
from tests.harness import poll


def test_a_local_worker_that_ignores_its_stop_is_killed_after_the_grace(tmp_path: Path) -> None:
    """A worker told to go that does not exit (it hangs while closing) is killed once the
    grace has passed, so it holds its leases no longer; one that exits in time is not."""
    ignores = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    workers = LocalWorkers([sys.executable, "-c", ignores], dict, tmp_path, grace=0.5)
    hung = workers.start(1)
    poll(lambda: "ready" in (tmp_path / "worker-1.log").read_text(), 10, "the worker up")
    workers.stop(hung)
    exited = poll(lambda: workers.reap() or None, 10, "the hung worker killed")
    assert exited == {hung[0]: -signal.SIGKILL}
    polite = LocalWorkers([sys.executable, "-c", "import time; time.sleep(60)"], dict, grace=30)
    going = polite.start(1)
    polite.stop(going)
    assert poll(lambda: polite.reap() or None, 10, "the worker gone") == {going[0]: -15}


SLEEPING = [sys.executable, "-c", "import time; time.sleep(60)"]


def _exiting(status: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.exit({status})"]


def _gone(members: list[Member]) -> list[Member]:
    return [member for member in members if member.gone]


def test_a_worker_that_exits_with_an_error_at_once_is_a_failed_start_told_once() -> None:
    """An error exit before any look saw the worker beat: a failed start (gone, never reported)
    at the next look only; stopping it signals nothing. An exit 0, or one told to go, is none."""
    workers = LocalWorkers(_exiting(2), dict)
    (failing,) = workers.start(1)
    poll(lambda: not workers.running(), 10, "the worker exited")
    (gone,) = _gone(workers.members())
    assert (gone.id, gone.gone, gone.reported, gone.up) == (failing, True, False, False)
    workers.stop([failing])  # as the autoscaler stops a gone member: nothing left to signal
    assert _gone(workers.members()) == []
    assert workers.reap() == {failing: 2}
    workers.command = _exiting(0)
    workers.start(1)
    workers.command = SLEEPING
    told = workers.start(1)
    workers.stop(told)
    poll(lambda: not workers.running(), 10, "both exited")
    assert _gone(workers.members()) == []
    assert sorted(workers.reap().values()) == [-signal.SIGTERM, 0]


def test_a_worker_that_beat_then_exits_with_an_error_soon_is_a_failed_start() -> None:
    """A worker a look saw beat that exits with an error within ``quick_exit`` of its start is
    a failed start; its heartbeat, left until it expires, is no member. One that exits later
    is none."""
    beating: dict[int, tuple[int, float]] = {}
    workers = LocalWorkers(SLEEPING, lambda: beating)
    workers.quick_exit = 3600.0
    (soon,) = workers.start(1)
    process = workers.processes[soon]
    beating[process.popen.pid] = (0, process.started)
    (member,) = workers.members()
    assert (member.id, member.up, member.reported) == (soon, True, True)
    process.popen.kill()  # killed (out of memory, say), not told to go: an error exit
    poll(lambda: not workers.running(), 10, "the worker exited")
    (gone,) = workers.members()  # its heartbeat is still there: no member of its own
    assert (gone.id, gone.gone, gone.reported) == (soon, True, False)
    workers.quick_exit = 0.0
    (late,) = workers.start(1)
    process = workers.processes[late]
    beating[process.popen.pid] = (0, process.started)
    assert [member.reported for member in workers.members()] == [True]
    process.popen.kill()
    poll(lambda: not workers.running(), 10, "the worker exited")
    assert workers.members() == []
