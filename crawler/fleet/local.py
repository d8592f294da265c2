"""Workers as local processes (``scrapy fleet autoscale SPIDER --local``): each is ``scrapy
crawl SPIDER`` with the autoscaler's ``-s`` settings, in a session of its own so a Ctrl-C at the
terminal reaches the autoscaler only, which tells each worker to go once (a second signal
would make Scrapy close uncleanly)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from crawler.fleet.autoscaler import Member

logger = logging.getLogger(__name__)


@dataclass
class Process:
    """One local worker."""

    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)
    told_at: float | None = None  # when it was sent SIGTERM (monotonic)

    @property
    def told(self) -> bool:
        return self.told_at is not None

    @property
    def id(self) -> str:
        return f"pid-{self.popen.pid}"


class LocalWorkers:
    """Starts and stops worker processes; ``beats()`` gives the live workers of this machine by
    pid, each with the pages it reported and when it started (Unix time). A worker is up once it
    beats, idle when its pages did not move since the last look; a live worker of this machine
    not started here (by an earlier ``--once``, by hand) is a member too, told to go by pid. A
    worker told to go and still running ``grace`` seconds later is killed (its leases come back
    to the queue when they expire): a worker that hangs while closing never holds its work."""

    errors: tuple[type[Exception], ...] = (OSError,)  # a worker that could not be started

    def __init__(
        self,
        command: Sequence[str],
        beats: Callable[[], Mapping[int, tuple[int, float]]],
        logs: Path | None = None,
        env: Mapping[str, str] | None = None,
        grace: float = math.inf,
    ) -> None:
        self.command = list(command)
        self.grace = grace
        self.beats = beats
        self.logs = logs
        self.env = dict(env) if env is not None else None
        self.processes: dict[str, Process] = {}
        self.exited: dict[str, int] = {}  # worker id -> exit status, since the last reap()
        self._pages: dict[int, int] = {}
        self._spawned = 0
        self._told: set[int] = set()  # pids of workers not started here, told to go

    def members(self) -> list[Member]:
        self._collect()
        beats = dict(self.beats())
        pages = {pid: beat[0] for pid, beat in beats.items()}
        found = []
        for process in self.processes.values():
            pid = process.popen.pid
            if not process.told:
                found.append(
                    Member(process.id, process.started, pid in pages, self._idle(pid, pages))
                )
        own = {process.popen.pid for process in self.processes.values()}
        for pid, (_, started) in beats.items():
            if pid not in own and pid not in self._told:
                found.append(Member(f"pid-{pid}", started, True, self._idle(pid, pages)))
        self._pages = pages
        return found

    def _idle(self, pid: int, pages: Mapping[int, int]) -> bool:
        return pid in pages and self._pages.get(pid) == pages[pid]

    def start(self, count: int) -> list[str]:
        started = [self._spawn() for _ in range(count)]
        return [process.id for process in started]

    def stop(self, ids: list[str]) -> None:
        for worker in ids:
            process = self.processes.get(worker)
            if process is None:
                self._stop_pid(int(worker.removeprefix("pid-")))
            elif not process.told and process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
                process.told_at = time.monotonic()

    def _stop_pid(self, pid: int) -> None:
        """A worker this autoscaler did not start: SIGTERM by pid, once."""
        if pid not in self._told:
            self._told.add(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def reap(self) -> dict[str, int]:
        """Workers that exited since the last call, with their exit status."""
        self._collect()
        exited, self.exited = self.exited, {}
        return exited

    def running(self) -> int:
        """Processes still running, told to go or not."""
        self._collect()
        return len(self.processes)

    def close(self, grace: float) -> dict[str, int]:
        """Tell every worker to go, one still starting once it is up (a SIGTERM before Scrapy
        handles it would kill it, status -15); kill those still running after ``grace``
        seconds."""
        deadline = time.monotonic() + grace
        self._await_up(deadline)
        self.stop(list(self.processes))
        for process in list(self.processes.values()):
            try:
                process.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
        return self.reap()

    def _await_up(self, deadline: float) -> None:
        """Until every worker started here and running beats, or ``deadline``."""
        while time.monotonic() < deadline:
            self._collect()
            beating = self.beats()
            starting = [p for p in self.processes.values() if p.popen.pid not in beating]
            if not starting:
                return
            threading.Event().wait(0.2)

    def _spawn(self) -> Process:
        self._spawned += 1
        log = subprocess.DEVNULL if self.logs is None else self._log(self._spawned)
        try:
            popen = subprocess.Popen(
                self.command,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if not isinstance(log, int):
                log.close()
        process = Process(popen)
        self.processes[process.id] = process
        return process

    def _log(self, number: int) -> IO[bytes]:
        assert self.logs is not None
        self.logs.mkdir(parents=True, exist_ok=True)
        return open(self.logs / f"worker-{number}.log", "wb")

    def _collect(self) -> None:
        now = time.monotonic()
        for worker, process in list(self.processes.items()):
            status = process.popen.poll()
            if (
                status is None
                and process.told_at is not None
                and now - process.told_at > self.grace
            ):
                logger.warning(
                    "Worker %s still running %.0f s after it was told to go: killed",
                    worker,
                    self.grace,
                )
                process.popen.kill()
                status = process.popen.wait()
            if status is not None:
                self.exited[worker] = status
                del self.processes[worker]
