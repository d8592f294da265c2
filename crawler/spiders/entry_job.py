"""The job of a start entry: its own (``{"url": ..., "job": "acme-2026-11"}``), else the
worker's (``scrapy crawl SPIDER -a job=acme-2026-11``), else none. The entry's requests carry
the job's number (meta ``frontier_job``, see crawler/frontier/jobs.py); the spider reads the
entry without its ``job`` key, whatever keys it takes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from crawler.config.rules import SettingsError
from crawler.frontier.jobs import InvalidJob, JobBook, check_job_id
from crawler.meta import JOB_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

KEY = "job"


def spider_job(spider: Any) -> str | None:
    """The job given as the spider argument ``job``; SettingsError if it is not a job id
    (the spider's arguments are checked as it is made: crawler/spiders/base.py)."""
    return job_argument(getattr(spider, KEY, None))


def job_argument(value: Any) -> str | None:
    """``-a job=VALUE`` as a job id (None when not given); SettingsError if it is none."""
    if value is None:
        return None
    try:
        return check_job_id(value)
    except InvalidJob as exc:
        raise SettingsError(f"-a job: {exc}") from None


def entry_job(raw: bytes, default: str | None, max_bytes: int) -> tuple[str | None, bytes]:
    """The entry's job (``default`` when it names none) and the entry without it; InvalidJob
    when its ``job`` is not a job id. An entry that is not a JSON object within ``max_bytes``
    is left to the spider as it is."""
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as the spider's reading
    if b'"job"' not in raw or len(raw) > max_bytes or not raw.lstrip().startswith(b"{"):
        return default, raw
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):
        return default, raw  # the spider's reading says what is wrong with it
    if not isinstance(entry, dict) or KEY not in entry:
        return default, raw
    job = check_job_id(entry.pop(KEY))
    return job, json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()


def of_job(crawler: Crawler, requests: list[Request], job: str | None) -> list[Request]:
    """``requests`` carrying the job's number; none if the job is cancelled."""
    if job is None:
        return requests
    book = JobBook.of(crawler)
    number = book.number(job)
    if number in book.cancelled:
        assert crawler.stats is not None
        crawler.stats.inc_value("jobs/cancelled_entries_dropped")
        return []
    for request in requests:
        request.meta[JOB_META] = number
    return requests
