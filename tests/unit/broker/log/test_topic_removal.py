"""Deleting a topic's logs (``LogManager.drop_topic``): its partition directories leave their
names at once (a topic created again under the name starts empty) and are removed in a worker
thread; directories a stop left moved aside are removed at the next start."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from broker.clock import FakeClock
from broker.config import BrokerConfig
from broker.log.manager import DELETED_SUFFIX, LogManager, partition_dir
from broker.log.topics import Topic
from tests.unit.batches import make_batch

T0 = 1_700_000_000_000


def _manager(data: Path) -> LogManager:
    return LogManager(data, BrokerConfig({}), FakeClock())


async def test_a_deleted_topic_leaves_nothing_and_its_name_is_free_at_once(tmp_path: Path) -> None:
    logs = _manager(tmp_path)
    old = Topic("t", uuid.uuid4(), 3, {})
    logs.open_topic(old, fresh=True)
    for p in range(3):
        logs.get("t", p).append(make_batch([(None, b"old")]), T0)
    logs.drop_topic(old)
    assert not any(partition_dir(tmp_path, "t", p).exists() for p in range(3))
    assert logs.get("t", 0) is None
    # Created again before the removal finished: the new topic starts empty and keeps its files.
    new = Topic("t", uuid.uuid4(), 3, {})
    logs.open_topic(new, fresh=True)
    await asyncio.gather(*logs.removals)
    assert not logs.removals
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(DELETED_SUFFIX)] == []
    for p in range(3):
        assert partition_dir(tmp_path, "t", p).is_dir()
        assert logs.get("t", p).log_end_offset == 0
    logs.close()


def test_directories_moved_aside_by_an_interrupted_deletion_go_at_start(tmp_path: Path) -> None:
    moved = tmp_path / f"t-0.{uuid.uuid4().hex}{DELETED_SUFFIX}"
    moved.mkdir()
    (moved / "00000000000000000000.log").write_bytes(b"x")
    kept = tmp_path / "u-0"
    kept.mkdir()
    _manager(tmp_path).remove_leftovers()
    assert not moved.exists() and kept.is_dir()
