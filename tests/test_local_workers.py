"""The local autoscaler's workers (crawler/fleet/local.py): stopped, and killed when they hang."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

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
