"""Fixtures of the chaos soak (`make test-chaos`): the seed, the report path, the cluster."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster.conftest import Cluster, Etcd, etcd  # noqa: F401  (the fixture)


@pytest.fixture
def seed() -> int:
    """CHAOS_SEED, or a fresh one; printed so that a failing run can be repeated with it."""
    value = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    print(f"chaos seed: {value} (repeat with CHAOS_SEED={value} make test-chaos)")
    return value


@pytest.fixture
def report_path(tmp_path: Path) -> Path:
    """Where the soak writes its JSON report: CHAOS_REPORT if set, else the test's tmp dir."""
    return Path(os.environ.get("CHAOS_REPORT") or tmp_path / "chaos-report.json")


# Acquisition locks may be short (the share group sets 10 s), and a group may retry a record
# up to 10 times: a record held by a broker that is killed comes back with its delivery count.
CHAOS_OVERRIDES = {
    "group.share.min.record.lock.duration.ms": "1000",
}


@pytest.fixture
def chaos_cluster(tmp_path: Path, etcd: Etcd) -> Iterator[Cluster]:  # noqa: F811
    c = Cluster(tmp_path, etcd, overrides=CHAOS_OVERRIDES)
    try:
        c.start()
        yield c
    finally:
        c.stop()
