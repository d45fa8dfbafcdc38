"""A local[2] SparkSession shared by the Spark tests, with the ``shoal`` sources registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark tests need the 'spark' extra (make test installs it)")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Spark starts its Python workers with PYSPARK_PYTHON (default: `python3` on PATH), which
    # would not see this venv's pyarrow and the project; the workers then fail to start.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import pipeline

    session = (SparkSession.builder.master("local[2]").appName("shoal-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    yield session
    session.stop()
