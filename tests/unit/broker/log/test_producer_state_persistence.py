"""Producer-state snapshots and recovery (broker/log/producer_state_manager.py,
storage/producer_snapshot.py): idempotent producers stay deduplicated across restarts.

A "crash" is a copy of the data directory taken while everything is open (what ``kill -9``
leaves: the page cache, nothing that close() does).
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.clock import FakeClock
from broker.config import BrokerConfig
from broker.log.manager import LogManager, partition_dir
from broker.log.producer_state import ProducerStates
from broker.log.producer_state_manager import ProducerStateManager
from broker.log.topics import Topic
from storage.producer_snapshot import (
    ProducerSnapshotEntry,
    decode,
    encode,
    list_snapshots,
    read_latest,
    snapshot_path,
    write_snapshot,
)
from tests.unit.batches import make_batch

TOPIC = Topic("orders", uuid.UUID(int=1), 1)


@dataclass
class Node:
    """One broker's worth of logs and producer state over a data directory."""

    data: Path
    clock: FakeClock
    config: BrokerConfig
    logs: LogManager
    producers: ProducerStateManager

    @classmethod
    def open(cls, data: Path, clock: FakeClock, **overrides: str) -> Node:
        config = BrokerConfig({"log.segment.bytes": "2048", **overrides})
        logs = LogManager(data, config, clock)
        logs.open_topic(TOPIC)
        return cls(data, clock, config, logs, ProducerStateManager(logs, config, clock))

    def produce(self, pid: int, epoch: int, seq: int, n: int = 2) -> tuple[ErrorCode, int]:
        """What the produce handler does for one idempotent batch: (error, base offset)."""
        states = self.producers.states(TOPIC.name, 0)
        now = self.clock.now_ms()
        check = states.check(pid, epoch, seq, n, now)
        if check.error != ErrorCode.none:
            return check.error, -1
        if check.duplicate_of is not None:
            return ErrorCode.none, check.duplicate_of[0]
        data = make_batch([(None, b"v" * 200)] * n, timestamp_ms=now, producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq)
        base = self.log.append(data, now).base_offset
        states.observe(pid, epoch, seq, n, base, base + n - 1, now)
        return ErrorCode.none, base

    @property
    def log(self):  # type: ignore[no-untyped-def]
        lg = self.logs.get(TOPIC.name, 0)
        assert lg is not None
        return lg

    @property
    def dir(self) -> Path:
        return partition_dir(self.data, TOPIC.name, 0)

    def close(self) -> None:
        self.producers.close()
        self.logs.close()

    def crash_copy(self, to: Path) -> Path:
        shutil.copytree(self.data, to)
        return to


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_snapshot_encoding_round_trips_and_reserves_the_transaction_fields() -> None:
    entries = [
        ProducerSnapshotEntry(7, 3, 1_000, ((0, 1, 10, 11), (2, 4, 12, 14))),
        ProducerSnapshotEntry(2**40, 0, -1, (), txn_first_offset=99, coordinator_epoch=5),
    ]
    assert decode(encode(entries)) == entries
    data = bytearray(encode(entries))
    data[-1] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        decode(bytes(data))
    with pytest.raises(ValueError):
        decode(encode(entries)[:-3])


def test_an_unreadable_newest_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    write_snapshot(tmp_path, 10, [ProducerSnapshotEntry(1, 0, 5, ((0, 0, 9, 9),))])
    write_snapshot(tmp_path, 20, [ProducerSnapshotEntry(1, 0, 6, ((1, 1, 19, 19),))])
    snapshot_path(tmp_path, 20).write_bytes(b"\x00\x01garbage")
    assert read_latest(tmp_path, 100) == (10, [ProducerSnapshotEntry(1, 0, 5, ((0, 0, 9, 9),))])
    assert read_latest(tmp_path, 9) is None


def _produce_some(node: Node, batches: int) -> list[tuple[int, int, int]]:
    """``batches`` batches alternating between two producers: (pid, seq, base offset)."""
    out = []
    seqs = {100: 0, 200: 0}
    for i in range(batches):
        pid = 100 if i % 2 == 0 else 200
        err, base = node.produce(pid, 0, seqs[pid])
        assert err == ErrorCode.none
        out.append((pid, seqs[pid], base))
        seqs[pid] += 2
    return out


def _assert_deduplicated(node: Node, sent: list[tuple[int, int, int]]) -> None:
    leo = node.log.log_end_offset
    for pid, seq, base in [s for s in sent if s[0] == 100][-5:] + [s for s in sent if s[0] == 200][-5:]:
        assert node.produce(pid, 0, seq) == (ErrorCode.none, base)
    assert node.log.log_end_offset == leo  # nothing appended twice
    # The next sequence of each producer follows on.
    last100 = max(s[1] for s in sent if s[0] == 100)
    assert node.produce(100, 0, last100 + 2)[0] == ErrorCode.none
    assert node.produce(200, 0, 999)[0] == ErrorCode.out_of_order_sequence_number


def test_clean_shutdown_snapshots_at_the_log_end(tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    sent = _produce_some(node, 12)
    leo = node.log.log_end_offset
    node.close()
    part = partition_dir(tmp_path / "data", TOPIC.name, 0)
    assert leo in list_snapshots(part)
    again = Node.open(tmp_path / "data", clock)
    _assert_deduplicated(again, sent)
    again.close()


def test_crash_replays_the_log_after_the_last_roll_snapshot(tmp_path: Path,
                                                           clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    sent = _produce_some(node, 30)  # ~14 KiB: several 2 KiB segments
    assert node.log.segment_count > 3
    snaps = list_snapshots(node.dir)
    # One snapshot per roll, named by the new segment's base offset (older ones kept: lso is 0).
    assert snaps and set(snaps) <= {s.base_offset for s in node.log._segments}  # noqa: SLF001
    assert max(snaps) < node.log.log_end_offset  # the tail after it must be replayed
    crashed = Node.open(node.crash_copy(tmp_path / "crashed"), clock)
    _assert_deduplicated(crashed, sent)
    node.close()
    crashed.close()


def test_crash_without_any_snapshot_rebuilds_from_the_whole_log(tmp_path: Path,
                                                                clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock, **{"log.segment.bytes": str(1 << 20)})
    sent = _produce_some(node, 8)
    assert list_snapshots(node.dir) == []
    crashed = Node.open(node.crash_copy(tmp_path / "crashed"), clock)
    _assert_deduplicated(crashed, sent)
    node.close()
    crashed.close()


def test_a_snapshot_past_the_log_end_is_dropped(tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock, **{"log.segment.bytes": str(1 << 20)})
    sent = _produce_some(node, 4)
    node.close()
    # As if recovery had truncated the log below a snapshot: it describes batches that are gone.
    write_snapshot(node.dir, 10_000, [ProducerSnapshotEntry(100, 0, clock.now_ms(),
                                                            ((50, 51, 9_000, 9_001),))])
    again = Node.open(tmp_path / "data", clock)
    _assert_deduplicated(again, sent)
    assert 10_000 not in list_snapshots(again.dir)
    again.close()


def test_retention_and_delete_records_drop_snapshots_below_the_log_start(
        tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock)
    sent = _produce_some(node, 30)
    before = list_snapshots(node.dir)
    assert len(before) >= 3
    node.log.delete_records_before(before[-2] + 1)
    # The next roll prunes: nothing below the log start survives but the newest snapshot.
    while list_snapshots(node.dir)[-1] == before[-1]:
        assert node.produce(300, 0, _next(node, 300))[0] == ErrorCode.none
    snaps = list_snapshots(node.dir)
    lso = node.log.log_start_offset
    assert all(s >= lso for s in snaps[:-1]) and snaps[-1] > before[-1]
    crashed = Node.open(node.crash_copy(tmp_path / "crashed"), clock)
    # Producer 200's last batches are still deduplicated after a crash.
    tail200 = [s for s in sent if s[0] == 200][-1]
    assert crashed.produce(200, 0, tail200[1]) == (ErrorCode.none, tail200[2])
    node.close()
    crashed.close()


def _next(node: Node, pid: int) -> int:
    states = node.producers.states(TOPIC.name, 0)
    entry = states._entries.get(pid)  # noqa: SLF001
    return 0 if entry is None else entry.batches[-1][1] + 1


def test_idle_producer_ids_expire(tmp_path: Path, clock: FakeClock) -> None:
    node = Node.open(tmp_path / "data", clock, **{"producer.id.expiration.ms": "60000"})
    node.produce(100, 0, 0)
    clock.advance(30_000)
    node.produce(200, 0, 0)
    clock.advance(30_000)
    assert node.producers.expire() == 1  # 100 idle for 60 s, 200 for 30 s
    states = node.producers.states(TOPIC.name, 0)
    assert len(states) == 1
    # KIP-360: the expired producer carries on at its next sequence (Kafka accepts any sequence
    # from a producer it holds no state for, rather than answering UNKNOWN_PRODUCER_ID).
    end = node.log.log_end_offset
    assert node.produce(100, 0, 2) == (ErrorCode.none, end)
    assert node.produce(200, 0, 2)[0] == ErrorCode.none
    assert node.produce(100, 0, 4)[0] == ErrorCode.none
    # Its state is back: a retry is a duplicate again, a gap is out of order.
    assert node.produce(100, 0, 4) == (ErrorCode.none, end + 4)
    assert node.produce(100, 0, 9)[0] == ErrorCode.out_of_order_sequence_number
    node.close()


def test_producer_states_snapshot_round_trip_keeps_five_batches() -> None:
    s = ProducerStates()
    for i in range(8):
        s.observe(5, 1, 2 * i, 2, 10 * i, 10 * i + 1, now_ms=i)
    restored = ProducerStates.from_snapshot(decode(encode(s.to_snapshot())))
    assert restored.check(5, 1, 14, 2).duplicate_of == (70, 71)
    assert restored.check(5, 1, 6, 2).duplicate_of == (30, 31)
    assert restored.check(5, 1, 4, 2).error == ErrorCode.out_of_order_sequence_number
    assert restored.check(5, 1, 16, 2).error == ErrorCode.none
