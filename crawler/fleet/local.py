"""Workers as local processes (``scrapy fleet autoscale SPIDER --local``): each is ``scrapy
crawl SPIDER`` with the autoscaler's ``-s`` settings, in a session of its own so a Ctrl-C at the
terminal reaches the autoscaler only, which tells each worker to go once (a second signal
would make Scrapy close uncleanly).

A worker that exits with an error (a status other than 0) without having been told to go, and
before any look saw its heartbeat or within QUICK_EXIT seconds of its start, is a failed start
(a setting it refused, a broken install, a Redis it cannot use): a ``gone`` member, not
``reported``, once, at the next look, for the autoscaler's guard to count
(crawler/fleet/backoff.py)."""

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


# Seconds after its start within which a worker that exits with an error is a failed start,
# even if a look saw its heartbeat.
QUICK_EXIT = 60.0
# Seconds an exited worker's pid is remembered, so its heartbeat, left until it expires after
# a kill, is not taken for a worker started elsewhere (a heartbeat lasts WORKER_HEARTBEAT_TTL).
ENDED_MEMORY = 3600.0


@dataclass
class Process:
    """One local worker."""

    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)
    told_at: float | None = None  # when it was sent SIGTERM (monotonic)
    reported: bool = False  # whether a look saw its heartbeat

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
        quick_exit: float = QUICK_EXIT,
    ) -> None:
        self.command = list(command)
        self.grace = grace
        self.quick_exit = quick_exit  # seconds: an error exit this soon is a failed start
        self.beats = beats
        self.logs = logs
        self.env = dict(env) if env is not None else None
        self.processes: dict[str, Process] = {}
        self.exited: dict[str, int] = {}  # worker id -> exit status, since the last reap()
        self._pages: dict[int, int] = {}
        self._spawned = 0
        self._told: set[int] = set()  # pids of workers not started here, told to go
        self._failed: list[Member] = []  # failed starts not told to a look yet
        self._gone: set[str] = set()  # failed starts told to a look: nothing left to stop
        self._ended: dict[int, float] = {}  # pids of workers started here that exited: when

    def members(self) -> list[Member]:
        """The workers running and not told to go, and the failed starts since the last look
        (``gone``, not ``reported``)."""
        self._collect()
        beats = self._live_beats()
        pages = {pid: beat[0] for pid, beat in beats.items()}
        found, self._failed = self._failed, []
        self._gone.update(member.id for member in found)
        for process in self.processes.values():
            pid = process.popen.pid
            process.reported = process.reported or pid in pages
            if not process.told:
                idle = self._idle(pid, pages)
                found.append(
                    Member(process.id, process.started, pid in pages, idle, False, process.reported)
                )
        own = {process.popen.pid for process in self.processes.values()}
        for pid, (_, started) in beats.items():
            if pid not in own and pid not in self._told:
                found.append(Member(f"pid-{pid}", started, True, self._idle(pid, pages)))
        self._pages = pages
        return found

    def _live_beats(self) -> dict[int, tuple[int, float]]:
        """The heartbeats of this machine by pid, but those left by workers started here that
        exited (a killed worker's lasts until it expires)."""
        now = time.time()
        self._ended = {pid: at for pid, at in self._ended.items() if now - at < ENDED_MEMORY}
        return {
            pid: beat
            for pid, beat in self.beats().items()
            if pid not in self._ended or beat[1] > self._ended[pid]  # the pid used again since
        }

    def _idle(self, pid: int, pages: Mapping[int, int]) -> bool:
        return pid in pages and self._pages.get(pid) == pages[pid]

    def start(self, count: int) -> list[str]:
        started = [self._spawn() for _ in range(count)]
        return [process.id for process in started]

    def stop(self, ids: list[str]) -> None:
        for worker in ids:
            process = self.processes.get(worker)
            if worker in self._gone:  # a failed start: it exited already
                self._gone.discard(worker)
            elif process is None:
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
                self._ended_with(worker, process, status)

    def _ended_with(self, worker: str, process: Process, status: int) -> None:
        """``process`` exited with ``status``: reaped, and kept for the next look if it is a
        failed start."""
        self.exited[worker] = status
        del self.processes[worker]
        now = time.time()
        self._ended[process.popen.pid] = now
        early = not process.reported or now - process.started < self.quick_exit
        if status != 0 and not process.told and early:
            self._failed.append(Member(worker, process.started, False, False, True, False))
