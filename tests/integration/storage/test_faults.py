"""Storage faults and resource limits seen from the broker (issue 12, sections 5 and 6).

In-process brokers (the handlers called directly, faults injected at the file layer through
``storage.fileops`` or at log opening) check that:

- a disk that fills up during a Produce answers KAFKA_STORAGE_ERROR per partition (not a dropped
  connection), keeps the partition appended before the failure, leaves nothing of the failed one,
  takes the log directory offline and stops the broker (exit status 1); a restart with space
  finds every acknowledged record;
- topic creation is atomic: a failure opening the Nth partition log answers an error, leaves no
  trace in ``topics.json`` or on disk, and the broker restarts fine;
- CreateTopics, CreatePartitions and Metadata auto-creation refuse partitions the open-file limit
  cannot hold (POLICY_VIOLATION), creating nothing.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import json
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import broker.resources
from broker.app import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import (
    create_partitions,
    create_topics,
    fetch,
    list_offsets,
    metadata,
    produce,
)
from protocol.codec import request_module
from protocol.messages import make
from storage import fileops
from storage.log_loader import CLEAN_SHUTDOWN_MARKER
from storage.segment_log import PartitionLog

from tests.unit.batches import make_batch
from tests.integration.rawclient import request

SMALL = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 1}


def new_broker(data: Path, **overrides: Any) -> Broker:
    return Broker(BrokerConfig({"log.dirs": str(data), **SMALL, **overrides}))


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[Broker]:
    b = new_broker(tmp_path / "data")
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def call(b: Broker, module: Any, version: int, req: Any) -> Any:
    ctx = RequestContext(b, module.API_KEY, version, 1, "test", "127.0.0.1", 1)
    out = module.handle(ctx, req)
    return await out if inspect.isawaitable(out) else out


async def create(b: Broker, name: str, partitions: int) -> Any:
    m = request_module(19, 7)
    topic = make(m.CreatableTopic, name=name, num_partitions=partitions, replication_factor=-1,
                 assignments=(), configs=())
    resp = await call(b, create_topics, 7, request(19, 7, topics=(topic,),
                                                    timeout=timedelta(seconds=5),
                                                    validate_only=False))
    return resp.topics[0]


async def produce_to(b: Broker, *names: str) -> dict[str, Any]:
    m = request_module(0, 9)
    data = tuple(
        make(m.TopicProduceData, name=name, partition_data=(
            make(m.PartitionProduceData, index=0,
                 records=make_batch([(name.encode(), b"x" * 4000)])),))
        for name in names)
    resp = await call(b, produce, 9, request(0, 9, transactional_id=None, acks=-1,
                                             timeout=timedelta(seconds=5), topic_data=data))
    return {t.name: t.partition_responses[0] for t in resp.responses}


def registered(data: Path) -> set[str]:
    return {t["name"] for t in json.loads((data / "topics.json").read_text())["topics"]}


class DiskFullFor(fileops.FileOps):
    """Writes into files of one partition directory hit ENOSPC after part of the data went in
    (a filesystem filling up mid-batch); every other file writes normally."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self.failed = 0

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        if f"/{self.partition}/" in os.readlink(f"/proc/self/fd/{fd}"):
            self.failed += 1
            if len(data) > 100 and self.failed == 1:
                return super().pwrite(fd, memoryview(data)[:100], pos)
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().pwrite(fd, data, pos)


# -- section 6: storage faults -----------------------------------------------------------------


async def test_disk_full_during_produce_answers_per_partition_and_stops_the_broker(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = new_broker(data)
    await b.start()
    stopped: list[bool] = []
    b.add_fatal_listener(lambda: stopped.append(True))
    for name in ("a", "b", "c"):
        assert (await create(b, name, 1)).error_code == ErrorCode.none
    assert (await produce_to(b, "b"))["b"].error_code == ErrorCode.none  # offset 0 of b
    previous = fileops.use(DiskFullFor("b-0"))
    try:
        parts = await produce_to(b, "a", "b", "c")
    finally:
        fileops.use(previous)
    # Kafka answers per partition: "a" went in before the failure and is acknowledged; "b" hit
    # the full disk; "c" finds the log directory offline. The connection is not dropped.
    assert (parts["a"].error_code, parts["a"].base_offset) == (ErrorCode.none, 0)
    assert parts["b"].error_code == ErrorCode.kafka_storage_error
    assert "ENOSPC" in parts["b"].error_message and "b-0" in parts["b"].error_message
    assert parts["c"].error_code == ErrorCode.kafka_storage_error
    b_log = data / "b-0" / f"{0:020d}.log"
    assert b_log.stat().st_size == b.logs.get("b", 0).size_bytes  # the 100 bytes were cut back
    for _ in range(100):  # the shutdown is handed to the event loop
        if stopped:
            break
        await asyncio.sleep(0.01)
    assert stopped and b.exit_code == 1 and b.fatal is not None and "b-0" in b.fatal
    await b.stop()
    # Nothing more was written to the failed directory: no clean-shutdown markers.
    assert not any((data / f"{t}-0" / CLEAN_SHUTDOWN_MARKER).exists() for t in "abc")

    again = new_broker(data)
    await again.start()
    try:
        ends = {t: again.logs.get(t, 0).log_end_offset for t in "abc"}
        assert ends == {"a": 1, "b": 1, "c": 0}  # everything acknowledged, nothing else
        retry = await produce_to(again, "b", "c")
        assert [(p.error_code, p.base_offset) for p in retry.values()] == [
            (ErrorCode.none, 1), (ErrorCode.none, 0)]
    finally:
        await again.stop()
    assert again.exit_code == 0


async def test_reads_of_an_offline_log_directory_answer_storage_errors(started: Broker) -> None:
    b = started
    assert (await create(b, "r", 1)).error_code == ErrorCode.none
    assert (await produce_to(b, "r"))["r"].error_code == ErrorCode.none
    b.logs.log_dir.fail("syncing r-0 (test)", OSError(errno.EIO, "Input/output error"))
    fm = request_module(1, 12)
    resp = await call(b, fetch, 12, request(
        1, 12, replica_id=-1, max_wait=timedelta(milliseconds=0), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(make(fm.FetchTopic, topic="r", partitions=(make(
            fm.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id=""))
    assert resp.responses[0].partitions[0].error_code == ErrorCode.kafka_storage_error
    lm = request_module(2, 7)
    resp = await call(b, list_offsets, 7, request(2, 7, replica_id=-1, isolation_level=0, topics=(
        make(lm.ListOffsetsTopic, name="r", partitions=(make(
            lm.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
            timestamp=0),)),)))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.kafka_storage_error
    assert (await produce_to(b, "r"))["r"].error_code == ErrorCode.kafka_storage_error


# -- section 5: atomic topic creation and the open-file limit ----------------------------------


async def test_failure_opening_a_partition_log_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    b = new_broker(data)
    await b.start()
    real_open = PartitionLog.open.__func__  # type: ignore[attr-defined]

    def failing_open(cls: type, directory: Path, *args: Any, **kwargs: Any) -> PartitionLog:
        if Path(directory).name == "t-2":
            raise OSError(errno.EIO, "Input/output error", str(directory))
        return real_open(cls, directory, *args, **kwargs)

    try:
        with monkeypatch.context() as mp:
            mp.setattr(PartitionLog, "open", classmethod(failing_open))
            result = await create(b, "t", 5)
        assert result.error_code == ErrorCode.kafka_storage_error
        assert "t-2" in result.error_message and "EIO" in result.error_message
        assert "t" not in registered(data) and b.topics.get("t") is None
        assert b.logs.get("t", 0) is None
        assert not [p.name for p in data.iterdir() if p.name.startswith("t-")]
        assert not b.logs.log_dir.offline  # opening is not a write fault of the directory
    finally:
        await b.stop()
    again = new_broker(data)
    await again.start()  # used to fail: topics.json listed "t" with partitions never created
    try:
        assert again.topics.get("t") is None
        assert (await create(again, "t", 5)).error_code == ErrorCode.none
        assert "t" in registered(data) and again.logs.get("t", 4) is not None
    finally:
        await again.stop()


async def test_failure_opening_a_new_partition_keeps_the_old_count(
        started: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    b = started
    assert (await create(b, "g", 2)).error_code == ErrorCode.none
    real_open = PartitionLog.open.__func__  # type: ignore[attr-defined]

    def failing_open(cls: type, directory: Path, *args: Any, **kwargs: Any) -> PartitionLog:
        if Path(directory).name == "g-3":
            raise OSError(errno.ENOSPC, "No space left on device", str(directory))
        return real_open(cls, directory, *args, **kwargs)

    m = request_module(37, 3)
    grow = make(m.CreatePartitionsTopic, name="g", count=5, assignments=None)
    with monkeypatch.context() as mp:
        mp.setattr(PartitionLog, "open", classmethod(failing_open))
        resp = await call(b, create_partitions, 3, request(
            37, 3, topics=(grow,), timeout=timedelta(seconds=5), validate_only=False))
    assert resp.results[0].error_code == ErrorCode.kafka_storage_error
    assert "g-3" in resp.results[0].error_message
    topic = b.topics.get("g")
    assert topic is not None and topic.partitions == 2
    assert b.logs.get("g", 2) is None and not (b.data_dir / "g-2").exists()
    saved = json.loads((b.data_dir / "topics.json").read_text())["topics"]
    assert [t["partitions"] for t in saved if t["name"] == "g"] == [2]


async def test_failed_registry_write_rolls_back_the_logs(
        started: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    b = started

    def full(*_: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(b.data_dir / "topics.json"))

    with monkeypatch.context() as mp:
        mp.setattr(b.topics, "_save", full)
        result = await create(b, "r", 3)
    assert result.error_code == ErrorCode.kafka_storage_error
    assert b.topics.get("r") is None and b.logs.get("r", 0) is None
    assert not (b.data_dir / "r-0").exists()


async def test_partitions_beyond_the_open_file_limit_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker.resources, "open_file_limit", lambda: 1024)
    data = tmp_path / "data"
    b = new_broker(data, **{"num.partitions": 300})
    await b.start()
    try:
        # 1024 descriptors, a quarter kept in reserve, 3 per partition: 256 partitions in all.
        big = await create(b, "big", 300)
        assert big.error_code == ErrorCode.policy_violation
        assert "ulimit" in big.error_message and "300 more partition(s)" in big.error_message
        default = await create(b, "default", -1)  # num.partitions
        assert default.error_code == ErrorCode.policy_violation
        assert (await create(b, "fits", 200)).error_code == ErrorCode.none

        m = request_module(37, 3)
        grow = make(m.CreatePartitionsTopic, name="fits", count=260, assignments=None)
        resp = await call(b, create_partitions, 3, request(
            37, 3, topics=(grow,), timeout=timedelta(seconds=5), validate_only=False))
        assert resp.results[0].error_code == ErrorCode.policy_violation
        assert b.topics.get("fits").partitions == 200

        mm = request_module(3, 9)
        resp = await call(b, metadata, 9, request(
            3, 9, topics=(make(mm.MetadataRequestTopic, name="auto"),),
            allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))
        assert resp.topics[0].error_code == ErrorCode.policy_violation
        assert registered(data) >= {"fits"} and not registered(data) & {"big", "default", "auto"}
        assert not [p for p in data.iterdir() if p.name.startswith(("big-", "default-", "auto-"))]
    finally:
        await b.stop()


async def test_metadata_auto_creation_follows_the_configs(tmp_path: Path) -> None:
    mm = request_module(3, 9)

    async def ask(b: Broker, name: str) -> Any:
        resp = await call(b, metadata, 9, request(
            3, 9, topics=(make(mm.MetadataRequestTopic, name=name),),
            allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))
        return resp.topics[0]

    on = new_broker(tmp_path / "on", **{"num.partitions": 3})
    await on.start()
    try:
        t = await ask(on, "auto")
        assert t.error_code == ErrorCode.none and len(t.partitions) == 3
    finally:
        await on.stop()
    off = new_broker(tmp_path / "off", **{"auto.create.topics.enable": False})
    await off.start()
    try:
        assert (await ask(off, "auto")).error_code == ErrorCode.unknown_topic_or_partition
        assert off.topics.get("auto") is None
    finally:
        await off.stop()


def test_open_file_soft_limit_is_raised_to_the_hard_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, 512) if hard == resource.RLIM_INFINITY else min(soft, hard // 2, 512)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
    try:
        now_soft, now_hard = broker.resources.raise_open_file_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (now_soft, hard)
        assert now_hard == hard and now_soft > lower
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class StateSyncFails(fileops.FileOps):
    """Syncs of ``__share_group_state`` files fail with EIO (the share-state log's disk fails)."""

    def fdatasync(self, fd: int) -> None:
        self._check(fd)
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._check(fd)
        super().fsync(fd)

    @staticmethod
    def _check(fd: int) -> None:
        if "/__share_group_state-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "Input/output error")


async def test_ack_whose_state_sync_failed_errs_and_keeps_the_records_acquired(
        started: Broker) -> None:
    from broker.share.acquisition import AcquireMode
    from broker.share.record_state import AckType, RecordState
    from persister.api import InitializeParams, SharePartitionKey

    b = started
    assert (await create(b, "t", 1)).error_code == ErrorCode.none
    for _ in range(3):
        assert (await produce_to(b, "t"))["t"].error_code == ErrorCode.none
    topic = b.topics.get("t")
    assert topic is not None and b.persister is not None
    key = SharePartitionKey("g", topic.topic_id, 0)
    assert (await b.persister.initialize(InitializeParams(key, 0, 0))).error == ErrorCode.none
    mgr = b.shares.partitions
    sp = await mgr.get("g", topic, 0)
    assert not isinstance(sp, ErrorCode)
    _, acquired = mgr.acquire(sp, "m1", 10, 10, AcquireMode.BATCH_OPTIMIZED, 1 << 20)
    assert [(a.first_offset, a.last_offset) for a in acquired] == [(0, 2)]

    previous = fileops.use(StateSyncFails())
    try:
        error, message = await mgr.acknowledge(key, "m1", [(0, 2, (int(AckType.ACCEPT),))])
    finally:
        fileops.use(previous)
    assert error == ErrorCode.kafka_storage_error, (error, message)
    assert b.logs.log_dir.offline
    # Not acknowledged, not released: still acquired by m1 under its lock ...
    views = [sp.offset_view(o) for o in range(3)]
    assert all(v is not None and v.state is RecordState.ACQUIRED and v.member_id == "m1"
               and v.pending is None for v in views), views
    assert mgr.acquire(sp, "m2", 10, 10, AcquireMode.BATCH_OPTIMIZED, 1 << 20)[1] == []
    # ... until the lock expires, when they become available again (delivery count kept).
    deadline = views[0].deadline_ms
    assert deadline is not None
    sp.on_timer(deadline)
    after = sp.offset_view(0)
    assert after is not None and after.state is RecordState.AVAILABLE
