"""A run's component dict (``-s DOWNLOADER_MIDDLEWARES=...``, Scrapyd's ``setting=``) adds to
the spider's instead of replacing it; naming a component with None turns it off
(crawler/addons.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy.crawler import Crawler
from scrapy.settings import SETTINGS_PRIORITIES, Settings
from scrapy.utils.project import get_project_settings

from crawler.addons import COMPONENT_DICTS, keep_components
from crawler.spiders.loader import SpiderLoader

SPIDERS = ["explore", "profiles", "maps", "links", "domains"]


def _effective(spider: str, **run: Any) -> Crawler:
    """The crawler ``scrapy crawl <spider> -s NAME=<json>...`` builds, settings applied."""
    settings = get_project_settings()
    for name, value in run.items():
        settings.set(name, json.dumps(value), priority="cmdline")
    settings.set("TWISTED_REACTOR_ENABLED", False)  # only the settings are applied
    crawler = Crawler(SpiderLoader.from_settings(settings).load(spider), settings)
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
