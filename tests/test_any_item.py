"""Any item a user's spider yields is stored: dicts and other item classes go where their class
or MONGO_COLLECTIONS says, else to the collection named after the spider, keyed on their URL."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from tests import forkserver
from tests.harness import ROOT, Crawl, Sandbox

pytestmark = pytest.mark.integration

USER_SPIDER = """
import attrs
import scrapy


@attrs.define
class Author:  # slotted: its destination is in its fields' defaults, not class attributes
    url: str
    collection: str = "authors"
    unique_key: str = "url"


class Quote(scrapy.Item):
    collection = "quotes_items"
    unique_key = "url"
    url = scrapy.Field()
    size = scrapy.Field()


class QuotesSpider(scrapy.Spider):
    name = "quotes"

    async def start(self):
        for number in range(4):
            yield scrapy.Request(f"{self.base}/@quote.user{number}", dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "size": len(response.body), "tags": ["a", "b"]}
        yield Quote(url=response.url, size=len(response.body))
        yield Author(url=response.url)
"""


def run_user_spider(crawl: Crawl, sandbox: Sandbox, tmp_path: Path, **settings: Any) -> Any:
    spider = tmp_path / "quotes.py"
    spider.write_text(USER_SPIDER)
    command = [
        sys.executable,
        "-m",
        "scrapy",
        "runspider",
        str(spider),
        "-a",
        f"base={sandbox.url}",
    ]
    for name, value in {"MAX_IDLE_TIME_BEFORE_CLOSE": 1, **settings}.items():
        command += ["-s", f"{name}={value}"]
    return forkserver.run(command, ROOT, crawl.env(), timeout=120)


def test_dicts_and_item_classes_are_stored_where_declared(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    collections = json.dumps({"dict": "quotes:url"})
    result = run_user_spider(crawl, sandbox, tmp_path, MONGO_COLLECTIONS=collections)
    assert result.returncode == 0, result.stderr[-3000:]
    urls = {f"{sandbox.url}/@quote.user{number}" for number in range(4)}
    quotes = list(crawl.mongo.db.quotes.find({}, {"_id": 0, "url": 1, "tags": 1}))
    assert sorted(doc["url"] for doc in quotes) == sorted(urls)
    assert all(doc["tags"] == ["a", "b"] for doc in quotes)
    items = {doc["url"] for doc in crawl.mongo.db.quotes_items.find({})}
    assert items == urls
    assert {doc["url"] for doc in crawl.mongo.db.authors.find({})} == urls
    indexes = crawl.mongo.db.quotes.index_information()
    assert any(index["key"] == [("url", 1)] and index.get("unique") for index in indexes.values())
    assert redis_client.llen("{quotes}:dead") == 0


def test_an_item_nobody_declared_goes_to_the_spiders_collection(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    result = run_user_spider(crawl, sandbox, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "MongoDB collection" in line]
    assert len(said) == 1, result.stderr[-3000:]
    assert "[crawler.storage.destinations] INFO: Storing dict items of spider 'quotes'" in said[0]
    assert "collection 'quotes', upserted on url" in said[0]
    assert "MONGO_COLLECTIONS" in said[0]
    assert " WARNING: " not in result.stderr, result.stderr[-3000:]
    assert " ERROR: " not in result.stderr, result.stderr[-3000:]
    urls = {f"{sandbox.url}/@quote.user{number}" for number in range(4)}
    assert {doc["url"] for doc in crawl.mongo.db.quotes.find({})} == urls
    assert crawl.mongo.db.quotes.count_documents({}) == 4
    assert crawl.mongo.db.quotes_items.count_documents({}) == 4
    assert redis_client.llen("{quotes}:dead") == 0


def test_items_declared_unstored_pass_through(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    collections = json.dumps({"quotes": ""})
    result = run_user_spider(crawl, sandbox, tmp_path, MONGO_COLLECTIONS=collections)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "quotes" not in crawl.mongo.db.list_collection_names()
    assert crawl.mongo.db.quotes_items.count_documents({}) == 4
    assert redis_client.llen("{quotes}:dead") == 0


def test_a_bad_destination_stops_the_start(crawl: Crawl) -> None:
    result = crawl("profiles", settings={"MONGO_COLLECTIONS": json.dumps({"dict": "nokey"})})
    assert result.returncode == 2
    assert "MONGO_COLLECTIONS" in result.stderr
