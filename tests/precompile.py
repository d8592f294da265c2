"""The test modules compiled once, before pytest-xdist starts its workers.

On a fresh checkout no test module has its compiled form yet (pytest rewrites each one's
asserts and caches the result in ``__pycache__``), nor has the project. Workers that start
together each find none and each compile all of them: some 3 CPU-seconds apiece, on a machine
whose cores are the suite's bottleneck. One ``pytest --collect-only`` run first compiles and
caches them all (about 6 s alone), and the workers then load what it wrote.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Seconds the collection may take: the workers then collect (and report) for themselves.
TIMEOUT = 120


def rewritten(module: Path) -> Path:
    """Where pytest caches ``module`` with its asserts rewritten."""
    tag = f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}"
    return module.parent / "__pycache__" / f"{module.stem}.{tag}.pyc"


def compiled(module: Path) -> bool:
    """Whether pytest would load ``module``'s cached form: the interpreter's magic number, and
    the hash of the module's source as it is now (pytest's own check)."""
    try:
        with rewritten(module).open("rb") as cached:
            header = cached.read(16)
    except OSError:
        return False
    source = importlib.util.source_hash(module.read_bytes())
    return header[:4] == importlib.util.MAGIC_NUMBER and header[8:16] == source[:8]


def stale(tests: Path = TESTS) -> list[Path]:
    """The test modules (and conftest files) pytest would compile again."""
    modules = [*tests.rglob("test_*.py"), *tests.rglob("conftest.py")]
    return [module for module in modules if not compiled(module)]


def compile_once(config: pytest.Config) -> None:
    """Collect every test once, in one process, when any test module is not compiled yet and
    compiled files are written at all (not under PYTHONDONTWRITEBYTECODE). What goes wrong
    there goes wrong again, and is reported, in the workers' own collection."""
    if sys.dont_write_bytecode or not stale():
        return
    command = [sys.executable, "-m", "pytest", "--collect-only", "-qq", "-p", "no:cacheprovider"]
    with contextlib.suppress(subprocess.TimeoutExpired):  # a module that hangs on import
        subprocess.run(
            [*command, str(TESTS)],
            cwd=config.rootpath,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=TIMEOUT,
        )
