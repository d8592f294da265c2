"""At start the pipeline only checks that MongoDB answers; each collection's unique index is made
when a spider first stores into it, and one MongoDB will not make is said as such, not taken for
MongoDB being away (crawler/storage/mongo.py, bulk.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from scrapy.utils.test import get_crawler

from crawler.config.values import Destination
from crawler.pipelines import MongoPipeline, MongoUnavailable
from crawler.storage.destinations import Destinations
from crawler.storage.mongo import MongoSettings
from devtools.services import free_port
from tests.harness import Mongo
from tests.mongo_config import pipeline_settings


def _settings(uri: str, database: str, spill: Path) -> MongoSettings:
    return pipeline_settings(uri, database, spill, timeout_ms=500, flush_interval=0.1)


def _stored(pipeline: MongoPipeline, *items: Any) -> list[BaseException | None]:
    """Opened, the items stored, closed: what became of each item."""

    async def scenario() -> list[BaseException | None]:
        await pipeline.open_spider()
        try:
            results = await asyncio.gather(
                *(pipeline.process_item(item) for item in items), return_exceptions=True
            )
        finally:
            await pipeline.close_spider()
        return [result if isinstance(result, BaseException) else None for result in results]

    return asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_users_pages_collection_with_a_repeated_url_does_not_stop_other_spiders(
    mongo: Mongo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The database holds the user's own ``pages`` collection, a url stored twice: a spider
    storing elsewhere starts and stores (it failed as "MongoDB ... is unavailable")."""
    mongo.db["pages"].insert_many([{"url": "https://a/"}, {"url": "https://a/"}])
    config = _settings(mongo.uri, mongo.database, tmp_path / "spill")
    pipeline = MongoPipeline(config, get_crawler().stats, "site_pages")

    assert _stored(pipeline, {"url": "https://x/1"}) == [None]

    assert [doc["url"] for doc in mongo.db["site_pages"].find()] == ["https://x/1"]
    assert mongo.db["pages"].count_documents({}) == 2
    assert "unavailable" not in caplog.text


def test_a_collection_mongodb_will_not_index_is_said_and_still_stored(
    mongo: Mongo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """MONGO_COLLECTIONS names a collection with a plain index on the key: the unique index
    MongoDB will not make is named in a WARNING, and its items are stored without it."""
    mongo.db["quotes"].create_index("url")
    config = _settings(mongo.uri, mongo.database, tmp_path / "spill")

    def worker() -> MongoPipeline:
        destinations = Destinations({"dict": Destination("quotes", "url")}, "quotes")
        return MongoPipeline(config, get_crawler().stats, "quotes", destinations)

    assert _stored(worker(), {"url": "https://q/1"}, {"url": "https://q/2"}) == [None, None]
    assert _stored(worker(), {"url": "https://q/1", "text": "again"}) == [None]

    assert sorted(doc["url"] for doc in mongo.db["quotes"].find()) == ["https://q/1", "https://q/2"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("would not make a unique index on quotes.url" in w for w in warnings), warnings
    assert "unavailable" not in caplog.text


def test_an_unreachable_mongodb_still_fails_at_start_naming_the_masked_uri(
    tmp_path: Path,
) -> None:
    uri = f"mongodb://bob:s3cret@127.0.0.1:{free_port()}"
    pipeline = MongoPipeline(
        _settings(uri, "crawler", tmp_path / "spill"), get_crawler().stats, "x"
    )
    with pytest.raises(MongoUnavailable) as raised:
        asyncio.run(pipeline.open_spider())
    assert f"MongoDB at mongodb://bob:***@127.0.0.1:{uri.rsplit(':', 1)[1]} is unavailable" in str(
        raised.value
    )
    assert "s3cret" not in str(raised.value)
