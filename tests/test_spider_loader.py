"""The project's spider loader (crawler/spiders/loader.py): a spider comes from the module named
after it, without importing the other spider modules; anything else loads them all."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from scrapy.exceptions import UsageError
from scrapy.settings import Settings
from scrapy.spiderloader import SpiderLoaderProtocol, get_spider_loader
from scrapy.utils.project import get_project_settings

from crawler import settings as project_settings
from crawler.commands.frontier import Command as FrontierCommand
from tests.harness import scrapy

SPIDER = """
from scrapy import Spider

class {cls}(Spider):
    name = {name!r}
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A spider package of its own name: ``alpha`` and ``beta`` each in the module of their
    name, ``gamma`` in the module ``other``."""
    name = f"spiders_{uuid.uuid4().hex[:8]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "alpha.py").write_text(SPIDER.format(cls="Alpha", name="alpha"))
    (root / "beta.py").write_text(SPIDER.format(cls="Beta", name="beta"))
    (root / "other.py").write_text(SPIDER.format(cls="Gamma", name="gamma"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _loader(*modules: str) -> SpiderLoaderProtocol:
    settings = Settings()
    settings.setmodule(project_settings)
    settings.set("SPIDER_MODULES", list(modules))
    return get_spider_loader(settings)


def test_a_spider_in_the_module_of_its_name_is_loaded_alone(package: str) -> None:
    loader = _loader(package)
    assert loader.load("alpha").__name__ == "Alpha"
    assert f"{package}.alpha" in sys.modules
    assert f"{package}.beta" not in sys.modules
    assert f"{package}.other" not in sys.modules


def test_any_other_spider_and_every_listing_load_all_the_modules(package: str) -> None:
    loader = _loader(package)
    assert loader.load("gamma").__name__ == "Gamma"
    assert f"{package}.beta" in sys.modules
    assert sorted(loader.list()) == ["alpha", "beta", "gamma"]
    assert sorted(_loader(package).list()) == ["alpha", "beta", "gamma"]
    with pytest.raises(KeyError, match="Spider not found: delta"):
        loader.load("delta")


def test_a_module_that_cannot_be_imported_fails_as_scrapy_has_it(package: str) -> None:
    loader = _loader(package)
    broken = Path(__import__(package).__path__[0]) / "broken.py"
    broken.write_text("import no_such_module_anywhere\n")
    with pytest.raises(ImportError):
        loader.load("broken")


def test_the_project_spiders_load_from_their_own_modules() -> None:
    loader = _loader(*project_settings.SPIDER_MODULES)
    for name in ("explore", "profiles", "links", "maps", "domains"):
        assert loader.load(name).__module__ == f"crawler.spiders.{name}"
    assert {"explore", "profiles", "links", "maps", "domains"} <= set(loader.list())


def test_a_command_names_a_spider_of_the_project_or_lists_them() -> None:
    command = FrontierCommand()
    command.settings = get_project_settings()
    assert command.known_spider("profiles") == "profiles"
    with pytest.raises(UsageError) as unknown:
        command.known_spider("nosuch")
    assert str(unknown.value) == (
        "no spider 'nosuch' in this project; spiders: "
        "['domains', 'explore', 'links', 'maps', 'profiles']"
    )


def test_scrapy_crawl_of_an_unknown_spider_is_a_usage_error() -> None:
    """Exit status 2 (a worker's loop retries 1, never 2) and one line naming the spiders."""
    done = scrapy("crawl", "nosuch")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no spider 'nosuch' in this project; spiders: ['domains'," in done.stderr
    assert "Traceback" not in done.stderr
