"""Test modules whose compiled forms are missing or out of date (tests/precompile.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.precompile import rewritten, stale


def _cache(module: Path, source: bytes) -> None:
    """A cached form of ``module`` as pytest writes it, for the given source."""
    header = importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00"
    rewritten(module).parent.mkdir(exist_ok=True)
    rewritten(module).write_bytes(header + importlib.util.source_hash(source)[:8])


def test_a_module_is_stale_until_its_cached_form_is_of_its_source(tmp_path: Path) -> None:
    module = tmp_path / "sub" / "test_example.py"
    module.parent.mkdir()
    module.write_text("def test_it() -> None:\n    assert True\n")
    (tmp_path / "helper.py").write_text("")  # not a test module: pytest does not rewrite it
    assert stale(tmp_path) == [module]

    _cache(module, b"an older source")
    assert stale(tmp_path) == [module]

    _cache(module, module.read_bytes())
    assert stale(tmp_path) == []
    module.touch()  # a checkout that leaves the source as it was: nothing to compile
    assert stale(tmp_path) == []
