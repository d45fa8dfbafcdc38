"""Spark pipelines over Shoal: a share-group streaming source and a batch writer (pyspark 4.x).

    import pipeline
    pipeline.register(spark)   # or: spark.dataSource.register(pipeline.ShareSource)

    df = (spark.readStream.format("shoal-share")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("group.id", "etl").option("subscribe", "orders").load())
    rows.write.format("shoal").option("kafka.bootstrap.servers", "localhost:9092")
        .option("topic", "out").save()

Needs the ``spark`` extra (pyspark, pyarrow); see ``pipeline/README.md``.
"""

from __future__ import annotations

from typing import Any

from pipeline.options import OptionError, SourceOptions, WriterOptions
from pipeline.source import DataLossError, ShareSource
from pipeline.writer import ShoalSink

__all__ = ["DataLossError", "OptionError", "ShareSource", "ShoalSink", "SourceOptions",
           "WriterOptions", "register"]


def register(spark: Any) -> None:
    """Register ``shoal-share`` (streaming source) and ``shoal`` (batch writer) with a session."""
    spark.dataSource.register(ShareSource)
    spark.dataSource.register(ShoalSink)
