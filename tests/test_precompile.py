"""Test modules whose compiled forms are missing or older than them (tests/precompile.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.precompile import rewritten, stale


def test_a_module_is_stale_until_its_rewritten_form_is_as_new(tmp_path: Path) -> None:
    module = tmp_path / "sub" / "test_example.py"
    module.parent.mkdir()
    module.write_text("def test_it() -> None:\n    assert True\n")
    (tmp_path / "helper.py").write_text("")  # not a test module: pytest does not rewrite it
    assert stale(tmp_path) == [module]

    compiled = rewritten(module)
    compiled.parent.mkdir()
    compiled.write_bytes(b"")
    os.utime(compiled, (module.stat().st_mtime - 10,) * 2)
    assert stale(tmp_path) == [module]

    os.utime(compiled, (module.stat().st_mtime + 1,) * 2)
    assert stale(tmp_path) == []
