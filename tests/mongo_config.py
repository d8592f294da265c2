"""The MongoDB pipeline's settings the storage tests start from (crawler/storage/mongo.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from crawler.storage.mongo import MongoSettings


def pipeline_settings(uri: str, database: str, spill: Path, **changes: Any) -> MongoSettings:
    """Batches of 500 written after 30 s (or full, or ``changes``), no retries, short timeouts."""
    base = MongoSettings(
        uri=uri,
        database=database,
        timeout_ms=2000,
        batch_size=500,
        flush_interval=30.0,
        max_pending=5000,
        retry_times=0,
        spill_dir=spill,
    )
    return replace(base, **changes)
