"""Run two commands at once, the second only on the CPU time the first leaves idle.

    python -m devtools.beside [--ok STATUS,...] COMMAND... --idle COMMAND...

``make unit`` runs the tests that measure rates and timeouts (marker ``timed``) this way, with
the other tests beside them: those run under Linux's ``SCHED_IDLE`` policy (``nice 19`` where
there is none), which gives them a core only while no other process wants it, so they take the
CPU the timed tests leave (about three quarters of two cores) without skewing what those
measure. The idle command's processes inherit the policy.

The idle command's output goes straight through; the first command's is kept in a file and
printed once both have ended, so the two never interleave. The exit status is 0 when each
command exited 0 or with a status given to ``--ok`` (pytest's 5: no test selected), else the
first command's failing status, else the idle one's (128 + the signal that killed it). SIGINT
and SIGTERM are passed on to both.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from types import FrameType

USAGE = "usage: python -m devtools.beside [--ok STATUS,...] COMMAND... --idle COMMAND..."


def parse(argv: Sequence[str]) -> tuple[set[int], list[str], list[str]]:
    """The statuses that count as success, the first command and the idle one."""
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
    first, idle = args[:split], args[split + 1 :]
    if not first or not idle:
        raise SystemExit(USAGE)
    return ok, first, idle


def run_on_idle_time() -> None:
    """Make the calling process (a child before exec) run only on CPU time nothing else wants."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def main(argv: Sequence[str]) -> int:
    ok, first_command, idle_command = parse(argv)
    with tempfile.TemporaryFile("w+b") as held:
        first = subprocess.Popen(first_command, stdout=held, stderr=subprocess.STDOUT)
        idle = subprocess.Popen(idle_command, preexec_fn=run_on_idle_time)

        def pass_on(signum: int, _frame: FrameType | None) -> None:
            for process in (first, idle):
                if process.poll() is None:
                    process.send_signal(signum)

        signal.signal(signal.SIGINT, pass_on)
        signal.signal(signal.SIGTERM, pass_on)
        statuses = (first.wait(), idle.wait())
        sys.stdout.write(f"\n==== {' '.join(first_command)}\n")
        sys.stdout.flush()
        held.seek(0)
        shutil.copyfileobj(held, sys.stdout.buffer)
        sys.stdout.flush()
    failed = [status for status in statuses if status not in ok]
    if not failed:
        return 0
    return 128 - failed[0] if failed[0] < 0 else failed[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
