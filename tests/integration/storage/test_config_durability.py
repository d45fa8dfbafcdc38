"""Topic configs, topic deletion and share-group deletion are durable before visible (issue 25,
section 3).

In-process brokers (handlers called directly) with a full disk injected at the file layer
(``storage.fileops``, through which ``topics.json`` and ``group-configs.json`` are written):

- AlterConfigs and IncrementalAlterConfigs on a topic, and DeleteTopics, answer
  KAFKA_STORAGE_ERROR when ``topics.json`` cannot be written, change nothing (in memory, on the
  open logs, after a restart) and the broker keeps serving; with the log directory offline they
  write nothing and answer the same;
- a topic-config change reaches the open logs at once: segments roll at the new size,
  retention deletes by the new time, the cleanup policy changes;
- deleting a share group removes its configs in a worker thread before the answer; a failed
  write answers KAFKA_STORAGE_ERROR for that group.
"""

from __future__ import annotations

import errno
import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.handlers import (
    alter_configs,
    delete_groups,
    delete_topics,
    incremental_alter_configs,
)
from coordinator.group.share.heartbeat import HeartbeatRequest
from protocol.codec import request_module
from protocol.messages import make
from storage import fileops

from tests.integration.rawclient import request
from tests.integration.storage.test_faults import call, create, new_broker, produce_to

TOPIC = 2


class FullFor(fileops.FileOps):
    """Writes into files whose name contains ``name`` fail with ENOSPC; the rest write."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.threads: list[int] = []

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        if self.name in os.readlink(f"/proc/self/fd/{fd}"):
            self.threads.append(threading.get_ident())
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().pwrite(fd, data, pos)


@pytest.fixture
def disk_full() -> Iterator[Any]:
    installed: list[fileops.FileOps] = []

    def fill(name: str) -> FullFor:
        ops = FullFor(name)
        installed.append(fileops.use(ops))
        return ops

    try:
        yield fill
    finally:
        if installed:
            fileops.use(installed[0])


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[Broker]:
    b = new_broker(tmp_path / "data")
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def incremental(b: Broker, topic: str, **configs: str) -> tuple[ErrorCode, str | None]:
    m = request_module(44, 1)
    res = make(m.AlterConfigsResource, resource_type=TOPIC, resource_name=topic, configs=tuple(
        make(m.AlterableConfig, name=k.replace("_", "."), config_operation=0, value=v)
        for k, v in configs.items()))
    resp = await call(b, incremental_alter_configs, 1,
                      request(44, 1, resources=(res,), validate_only=False))
    r = resp.responses[0]
    return r.error_code, r.error_message


async def legacy(b: Broker, topic: str, **configs: str) -> tuple[ErrorCode, str | None]:
    m = request_module(33, 2)
    res = make(m.AlterConfigsResource, resource_type=TOPIC, resource_name=topic, configs=tuple(
        make(m.AlterableConfig, name=k.replace("_", "."), value=v) for k, v in configs.items()))
    resp = await call(b, alter_configs, 2, request(33, 2, resources=(res,), validate_only=False))
    r = resp.responses[0]
    return r.error_code, r.error_message


async def delete(b: Broker, *names: str) -> dict[str, Any]:
    m = request_module(20, 6)
    topics = tuple(make(m.DeleteTopicState, name=n, topic_id=uuid.UUID(int=0)) for n in names)
    resp = await call(b, delete_topics, 6, request(20, 6, topics=topics,
                                                   timeout=timedelta(seconds=5)))
    return {r.name: r for r in resp.responses}


async def test_a_topic_config_that_cannot_be_written_changes_nothing(
        tmp_path: Path, disk_full: Any) -> None:
    data = tmp_path / "data"
    b = new_broker(data)
    await b.start()
    try:
        assert (await create(b, "t", 1)).error_code == ErrorCode.none
        assert await incremental(b, "t", retention_ms="3600000") == (ErrorCode.none, None)
        before = b.logs.get("t", 0).config
        full = disk_full("topics.json")
        for alter in (incremental, legacy):
            error, message = await alter(b, "t", retention_ms="60000", segment_bytes="2048")
            assert error == ErrorCode.kafka_storage_error
            assert message is not None and "No space left on device" in message
            topic = b.topics.get("t")
            assert topic is not None and topic.configs == {"retention.ms": 3600000}
            assert b.logs.get("t", 0).config == before  # the open log kept its settings
        assert full.threads
        # The broker still serves: the partition takes records, the log directory is online.
        assert (await produce_to(b, "t"))["t"].error_code == ErrorCode.none
        assert not b.logs.log_dir.offline
    finally:
        await b.stop()
    again = new_broker(data)
    await again.start()
    try:
        topic = again.topics.get("t")
        assert topic is not None and topic.configs == {"retention.ms": 3600000}
    finally:
        await again.stop()


async def test_a_topic_deletion_that_cannot_be_written_deletes_nothing(
        tmp_path: Path, disk_full: Any) -> None:
    data = tmp_path / "data"
    b = new_broker(data)
    await b.start()
    try:
        for name in ("a", "b"):
            assert (await create(b, name, 1)).error_code == ErrorCode.none
        disk_full("topics.json")
        answers = await delete(b, "a", "b", "missing")
        assert {n: r.error_code for n, r in answers.items()} == {
            "a": ErrorCode.kafka_storage_error, "b": ErrorCode.kafka_storage_error,
            "missing": ErrorCode.unknown_topic_or_partition}
        assert "No space left on device" in answers["a"].error_message
        assert b.topics.get("a") is not None and (data / "a-0").is_dir()
        assert (await produce_to(b, "a"))["a"].error_code == ErrorCode.none
    finally:
        await b.stop()
    again = new_broker(data)
    await again.start()
    try:
        assert again.topics.get("a") is not None and again.topics.get("b") is not None
        assert again.logs.get("a", 0).log_end_offset == 1
        fileops.use(fileops.FileOps())  # space again: the deletion goes through
        answers = await delete(again, "a", "b")
        assert {r.error_code for r in answers.values()} == {ErrorCode.none}
        assert again.topics.get("a") is None and not (data / "a-0").exists()
    finally:
        await again.stop()


async def test_an_offline_log_directory_refuses_config_changes_and_deletions(
        started: Broker) -> None:
    b = started
    assert (await create(b, "t", 1)).error_code == ErrorCode.none
    before = (b.data_dir / "topics.json").read_bytes()
    b.logs.log_dir.fail("writing t-0/00000000000000000000.log",
                        OSError(errno.EIO, "Input/output error"))
    error, message = await incremental(b, "t", retention_ms="60000")
    assert error == ErrorCode.kafka_storage_error and message is not None
    assert "offline" in message
    assert (await delete(b, "t"))["t"].error_code == ErrorCode.kafka_storage_error
    assert b.topics.get("t") is not None
    assert (b.data_dir / "topics.json").read_bytes() == before  # nothing written there


async def test_open_logs_take_topic_config_changes_at_once(started: Broker) -> None:
    b = started
    assert (await create(b, "t", 1)).error_code == ErrorCode.none
    lg = b.logs.get("t", 0)
    assert (await produce_to(b, "t"))["t"].error_code == ErrorCode.none
    assert lg.config.delete_policy and not lg.config.compact_policy
    # Segments roll at the new size: each ~4 KB batch now starts a segment.
    assert await incremental(b, "t", segment_bytes="1024") == (ErrorCode.none, None)
    for _ in range(3):
        assert (await produce_to(b, "t"))["t"].error_code == ErrorCode.none
    segment_files = sorted(p.name for p in (b.data_dir / "t-0").glob("*.log"))
    assert len(segment_files) == 4, segment_files
    # Retention deletes by the new time (the records are stamped "now"; a minute later they are
    # past a 1 s retention), up to the active segment.
    assert await incremental(b, "t", retention_ms="1000") == (ErrorCode.none, None)
    assert lg.enforce_retention(b.clock.now_ms() + 60_000) == 3
    assert lg.log_start_offset == 3
    # The cleanup policy changes: compact only, so time retention no longer deletes.
    assert await legacy(b, "t", cleanup_policy="compact") == (ErrorCode.none, None)
    assert lg.config.compact_policy and not lg.config.delete_policy
    assert lg.config.retention_ms == b.config.get("log.retention.ms")  # legacy replaced all


async def test_deleting_a_share_group_removes_its_configs_off_the_loop(
        started: Broker, disk_full: Any) -> None:
    b = started
    b.create_topic("t", 1)
    for group in ("g1", "g2"):
        b.group_configs.alter(group, {"share.auto.offset.reset": "earliest"})
        resp = await b.share_groups.heartbeat(HeartbeatRequest(
            group, f"{group}-m", 0, subscribed_topic_names=("t",)))
        assert resp.error_code == ErrorCode.none
        left = await b.share_groups.heartbeat(HeartbeatRequest(group, f"{group}-m", -1))
        assert left.error_code == ErrorCode.none

    async def delete_group(group: str) -> Any:
        resp = await call(b, delete_groups, 2, request(42, 2, groups_names=(group,)))
        return resp.results[0]

    full = disk_full("group-configs.json")
    failed = await delete_group("g1")
    assert failed.error_code == ErrorCode.kafka_storage_error
    assert full.threads and threading.get_ident() not in full.threads  # a worker thread wrote
    assert b.group_configs.overrides("g1") == {"share.auto.offset.reset": "earliest"}
    fileops.use(fileops.FileOps())
    assert (await delete_group("g2")).error_code == ErrorCode.none
    assert b.group_configs.overrides("g2") == {}
    assert "g2" not in (b.data_dir / "group-configs.json").read_text()


async def group_config(b: Broker, group: str, **configs: str) -> tuple[ErrorCode, str | None]:
    m = request_module(44, 1)
    res = make(m.AlterConfigsResource, resource_type=32, resource_name=group, configs=tuple(
        make(m.AlterableConfig, name=k.replace("_", "."), config_operation=0, value=v)
        for k, v in configs.items()))
    resp = await call(b, incremental_alter_configs, 1,
                      request(44, 1, resources=(res,), validate_only=False))
    r = resp.responses[0]
    return r.error_code, r.error_message


async def test_group_configs_follow_the_offline_log_directory_and_a_full_disk(
        started: Broker, disk_full: Any) -> None:
    """IncrementalAlterConfigs on a GROUP: a full disk, then an offline log directory, answer
    KAFKA_STORAGE_ERROR and change nothing (live, on disk), as topic configs do."""
    b = started
    assert await group_config(b, "g", share_auto_offset_reset="earliest") == (
        ErrorCode.none, None)
    path = b.data_dir / "group-configs.json"
    before = path.read_bytes()
    full = disk_full("group-configs")
    error, message = await group_config(b, "g", share_auto_offset_reset="latest")
    assert error == ErrorCode.kafka_storage_error and "No space left" in (message or "")
    assert full.threads and threading.get_ident() not in full.threads  # written off the loop
    assert b.group_configs.overrides("g") == {"share.auto.offset.reset": "earliest"}
    fileops.use(fileops.FileOps())
    b.logs.log_dir.fail("writing t-0/00000000000000000000.log",
                        OSError(errno.EIO, "Input/output error"))
    error, message = await group_config(b, "g", share_auto_offset_reset="latest")
    assert error == ErrorCode.kafka_storage_error and "offline" in (message or "")
    assert b.group_configs.overrides("g") == {"share.auto.offset.reset": "earliest"}
    assert path.read_bytes() == before  # nothing written there
