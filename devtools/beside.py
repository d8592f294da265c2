"""Run commands one after another, and beside them one more only on the CPU time they leave idle.

    python -m devtools.beside [--ok STATUS,...] COMMAND... [--then COMMAND...]... --idle COMMAND...

``make unit`` runs the tests that measure rates and timeouts (marker ``timed``) this way, with
the other tests beside them under Linux's ``SCHED_IDLE`` policy: a core goes to them only while
no other process wants it, so they take the CPU the timed tests leave without skewing what those
measure. Their processes inherit the policy. Where the system refuses it they run at
``nice 19``, which only lowers their share.

The commands before ``--idle`` run in turn, each once the one before it has succeeded; the idle
command runs from the start until it ends. Its output goes straight through; the others' is
kept in a file (its name printed first) and printed once all have ended, so the two never
interleave; a command in turn that fails is named at once. The exit status is 0 when each
command that ran exited 0 or with a status given to ``--ok`` (pytest's 5: no test selected),
else the first failing status of the commands in turn (127: it could not start), else the idle
one's (128 + the signal that killed it). SIGINT and SIGTERM are passed on to each running
command's process group, once; no command starts after one of them came, and the run then
fails (128 + the signal, unless a command failed first).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from types import FrameType
from typing import IO, Any

USAGE = (
    "usage: python -m devtools.beside [--ok STATUS,...] COMMAND... [--then COMMAND...]... "
    "--idle COMMAND..."
)


def parse(argv: Sequence[str]) -> tuple[set[int], list[list[str]], list[str]]:
    """The statuses that count as success, the commands run in turn and the idle one."""
    args = list(argv)
    ok = {0}
    if args[:1] == ["--ok"]:
        if len(args) < 2:
            raise SystemExit(USAGE)
        try:
            ok |= {int(status) for status in args[1].split(",")}
        except ValueError:
            raise SystemExit(f"--ok takes exit statuses, not {args[1]!r}\n{USAGE}") from None
        args = args[2:]
    if "--idle" not in args:
        raise SystemExit(USAGE)
    split = args.index("--idle")
    steps: list[list[str]] = [[]]
    for arg in args[:split]:
        if arg == "--then":
            steps.append([])
        else:
            steps[-1].append(arg)
    idle = args[split + 1 :]
    if not all(steps) or not idle:
        raise SystemExit(USAGE)
    return ok, steps, idle


def run_on_idle_time() -> None:
    """Make the calling process (a child before exec) run only on CPU time nothing else wants."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    if process.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


class Commands:
    """The commands started, each in a process group of its own, and the stop signals that came
    (passed on to each running group once: a second SIGINT would cut pytest's teardown short)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        self.received: list[int] = []
        signal.signal(signal.SIGINT, self.pass_on)
        signal.signal(signal.SIGTERM, self.pass_on)

    def pass_on(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        for process in self.started:
            signal_group(process, signum)

    def start(self, command: list[str], **options: Any) -> subprocess.Popen[bytes]:
        self.started.append(subprocess.Popen(command, process_group=0, **options))
        if self.received:  # a signal that came before it started
            signal_group(self.started[-1], self.received[-1])
        return self.started[-1]

    def run_step(self, command: list[str], held: IO[bytes], ok: set[int]) -> int:
        """Run one step to its end, its output into ``held``; its status (127, as a shell says,
        if it cannot start), said at once when it is a failure."""
        try:
            status = self.start(command, stdout=held, stderr=subprocess.STDOUT).wait()
        except OSError as exc:
            print(f"beside: cannot start {command[0]}: {exc}", file=sys.stderr, flush=True)
            status = 127
        if status not in ok:
            print(f"==== failed with status {status}: {' '.join(command)}", flush=True)
        return status

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                signal_group(process, signal.SIGTERM)
                process.wait()


def run(
    commands: Commands, ok: set[int], steps: list[list[str]], idle: list[str], held: IO[bytes]
) -> list[int]:
    """The statuses of the steps that ran, in turn, and then the idle command's."""
    try:
        beside = commands.start(idle, preexec_fn=run_on_idle_time)
        statuses: list[int] = []
        for step in steps:
            if commands.received or (statuses and statuses[-1] not in ok):
                break
            statuses.append(commands.run_step(step, held, ok))
        return [*statuses, beside.wait()]
    finally:
        commands.stop_all()


def main(argv: Sequence[str]) -> int:
    ok, steps, idle_command = parse(argv)
    commands = Commands()  # signals are passed on from here
    title = " --then ".join(" ".join(step) for step in steps)
    with tempfile.NamedTemporaryFile("w+b", prefix="beside-", suffix=".log") as held:
        print(f"==== {title} > {held.name}, printed at the end", flush=True)
        try:
            statuses = run(commands, ok, steps, idle_command, held)
        finally:
            print(f"\n==== {title}", flush=True)
            held.seek(0)
            shutil.copyfileobj(held, sys.stdout.buffer)
            sys.stdout.flush()
    failed = [status for status in statuses if status not in ok]
    if failed:
        return 128 - failed[0] if failed[0] < 0 else failed[0]
    # A run a stop signal came to is no success, however its commands ended.
    return 128 + commands.received[0] if commands.received else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
