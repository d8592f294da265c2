"""A run's component dict (``-s DOWNLOADER_MIDDLEWARES=...``, Scrapyd's ``setting=``) adds to
the spider's instead of replacing it; naming a component with None turns it off
(crawler/addons.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.settings import SETTINGS_PRIORITIES, Settings
from scrapy.utils.project import get_project_settings

from crawler.addons import COMPONENT_DICTS, keep_components, keep_project_addon
from crawler.config.rules import SettingsError
from crawler.spiders.loader import SpiderLoader
from tests.harness import no_reactor_needed

SPIDERS = ["explore", "profiles", "maps", "links", "domains"]


def _effective(spider: str, **run: Any) -> Crawler:
    """The crawler ``scrapy crawl <spider> -s NAME=<json>...`` builds, settings applied."""
    settings = get_project_settings()
    for name, value in run.items():
        settings.set(name, json.dumps(value), priority="cmdline")
    settings.update(no_reactor_needed())  # only the settings are applied
    crawler = Crawler(SpiderLoader.from_settings(settings).load(spider), settings)
    keep_project_addon(crawler.settings)  # as the crawl command does
    crawler._apply_settings()
    return crawler


@pytest.mark.parametrize("spider", SPIDERS)
def test_a_run_adds_a_component_and_turns_one_off_keeping_the_rest(spider: str) -> None:
    default = _effective(spider).settings
    changed = _effective(
        spider,
        DOWNLOADER_MIDDLEWARES={
            "tests.depth_header.DepthHeaderMiddleware": 990,
            "crawler.middlewares.HostFullMiddleware": None,
        },
        EXTENSIONS={"scrapy.extensions.closespider.CloseSpider": 10},
        ITEM_PIPELINES={"crawler.pipelines.ValidationPipeline": 150},
    ).settings
    # A run's pipelines are its own, as in Scrapy.
    assert changed.getdict("ITEM_PIPELINES") == {"crawler.pipelines.ValidationPipeline": 150}
    downloader = default.getdict("DOWNLOADER_MIDDLEWARES")
    assert changed.getdict("DOWNLOADER_MIDDLEWARES") == {
        **downloader,
        "tests.depth_header.DepthHeaderMiddleware": 990,
        "crawler.middlewares.HostFullMiddleware": None,
    }
    assert changed.getdict("SPIDER_MIDDLEWARES") == default.getdict("SPIDER_MIDDLEWARES")
    assert changed.getdict("EXTENSIONS") == {
        **default.getdict("EXTENSIONS"),
        "scrapy.extensions.closespider.CloseSpider": 10,
    }


class OwnComponents(Spider):
    """A user's spider whose custom_settings give its own component dicts."""

    name = "own_components"
    custom_settings = {  # noqa: RUF012 (as a user writes it)
        "EXTENSIONS": {"scrapy.extensions.closespider.CloseSpider": 10},
        "SPIDER_MIDDLEWARES": {"tests.depth_header.DepthHeaderMiddleware": 700},
        "DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.HostFullMiddleware": None},
    }


def test_a_spider_s_own_component_dicts_add_to_the_project_s() -> None:
    """A spider's custom_settings dict replaced the project's whole: the settings check, the
    fleet monitor and the lease middleware went, and nothing said so."""
    settings = get_project_settings()
    settings.update(no_reactor_needed())
    crawler = Crawler(OwnComponents, settings)
    keep_project_addon(crawler.settings)
    crawler._apply_settings()
    project = _effective("profiles").settings
    for name in COMPONENT_DICTS:
        own = OwnComponents.custom_settings[name]
        assert crawler.settings.getdict(name) == {**project.getdict(name), **own}, name


@pytest.mark.parametrize("addons", [{}, {"tests.test_addons.NoAddon": 5}])
def test_a_run_s_own_addons_keep_the_project_s_add_on(addons: dict[str, int]) -> None:
    """``-s ADDONS=...`` is read before any add-on runs: the crawl command puts the project's
    add-on back, so a run's middleware dict still adds to the spider's."""
    default = _effective("profiles").settings.getdict("DOWNLOADER_MIDDLEWARES")
    mine = {"tests.depth_header.DepthHeaderMiddleware": 990}
    changed = _effective("profiles", ADDONS=addons, DOWNLOADER_MIDDLEWARES=mine).settings
    assert changed.getdict("ADDONS") == {**addons, "crawler.addons.ProjectComponents": 0}
    assert changed.getdict("DOWNLOADER_MIDDLEWARES") == {**default, **mine}


def test_the_project_s_add_on_named_with_null_leaves_the_run_s_dict_alone() -> None:
    """As in Scrapy, the run's dict replaces the spider's: the leases go, and the settings
    check refuses the crawl."""
    mine = {"tests.depth_header.DepthHeaderMiddleware": 990}
    with pytest.raises(SettingsError, match="a dict that keeps LeaseDownloaderMiddleware on"):
        _effective(
            "profiles",
            ADDONS={"crawler.addons.ProjectComponents": None},
            DOWNLOADER_MIDDLEWARES=mine,
        )


class NoAddon:
    """An add-on that changes nothing."""

    def update_settings(self, settings: Settings) -> None:
        pass


paths = st.sampled_from([f"pkg.mod.C{n}" for n in range(8)])
orders = st.one_of(st.none(), st.integers(-1000, 1000))


@given(
    wanted=st.dictionaries(paths, orders),
    run=st.dictionaries(paths, orders),
    name=st.sampled_from(COMPONENT_DICTS),
)
def test_the_run_s_entries_win_and_the_spider_s_others_come_back(
    wanted: dict[str, int | None], run: dict[str, int | None], name: str
) -> None:
    settings = Settings()
    settings.set(name, json.dumps(run), priority="cmdline")
    kept = keep_components(settings, name, wanted)
    assert settings.getdict(name) == {**wanted, **run}
    assert settings.getpriority(name) == SETTINGS_PRIORITIES["cmdline"]
    assert sorted(kept) == sorted(p for p, o in wanted.items() if p not in run and o is not None)
