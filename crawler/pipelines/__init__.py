"""Item pipelines: validation, then batched MongoDB upserts that survive MongoDB going away."""

from crawler.pipelines.mongo import MongoPipeline, MongoUnavailable
from crawler.pipelines.validation import ValidationPipeline

__all__ = ["MongoPipeline", "MongoUnavailable", "ValidationPipeline"]
