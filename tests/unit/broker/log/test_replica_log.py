"""broker/log/replica_log.py: a follower's appends and truncations leave the partition in the
state the leader's own appends left it in (producer state, ongoing transactions, LSO, aborted
transactions), over real logs on disk.

The leader is a ``Node`` of test_txn_log.py (the produce handler's partition append and the
transactional log's markers); the follower replicates it with ``ReplicaLog``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.clock import FakeClock
from broker.log.replica_log import NoReplicaError, ReplicaLog
from storage.log import UnexpectedOffsetError
from storage.producer_snapshot import list_snapshots
from tests.unit.broker.log.test_txn_log import TOPIC, Node

P = TOPIC.name


def replica(node: Node) -> ReplicaLog:
    return ReplicaLog(node.logs, node.producers)


def replicate(leader: Node, follower: Node, max_bytes: int) -> None:
    rl = replica(follower)
    while follower.log.log_end_offset < leader.log.log_end_offset:
        rl.append(P, 0, leader.log.read(follower.log.log_end_offset, max_bytes).data)


def derived(node: Node) -> tuple[Any, ...]:
    """What a reader or a producer of the partition can observe besides the records."""
    states = node.producers.states(P, 0)
    return (node.log.log_end_offset, node.lso(), node.aborted(), states.ongoing(),
            states.to_snapshot(), node.log.first_unstable_offset)


def records(node: Node) -> bytes:
    return node.log.read(node.log.log_start_offset, 1 << 24).data


def run(node: Node, ops: list[tuple[str, int, int]], seqs: dict[int, int], epoch: int = 0) -> None:
    for op, pid, n in ops:
        if op in ("txn", "plain"):
            seq = seqs.get(pid, 0)
            err, _ = node.produce(pid, epoch, seq, n, txn=op == "txn")
            if err == ErrorCode.none:
                seqs[pid] = seq + n
        else:
            assert node.marker(pid, epoch, commit=op == "commit") == ErrorCode.none


_OPS = st.lists(st.tuples(st.sampled_from(["txn", "plain", "commit", "abort"]),
                          st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=25)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, max_bytes=st.integers(1, 1500))
def test_follower_derives_the_leaders_state(ops: list[tuple[str, int, int]],
                                            max_bytes: int) -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        leader = Node.open(Path(tmp) / "a", clock, segment_bytes=2048)
        follower = Node.open(Path(tmp) / "b", clock)
        seqs: dict[int, int] = {}
        run(leader, ops, seqs)
        replicate(leader, follower, max_bytes)
        assert records(follower) == records(leader)
        assert derived(follower) == derived(leader)
        # Elected leader, the follower deduplicates a retried batch and continues sequences.
        for pid, seq in seqs.items():
            if pid not in follower.producers.states(P, 0).ongoing():
                assert follower.produce(pid, 0, seq, 1, txn=False)[0] == ErrorCode.none
        leader.close()
        follower.close()


def test_a_retried_batch_is_a_duplicate_on_the_new_leader(tmp_path: Path,
                                                          clock: FakeClock) -> None:
    leader = Node.open(tmp_path / "a", clock)
    follower = Node.open(tmp_path / "b", clock)
    assert leader.produce(5, 0, 0, 3, txn=False) == (ErrorCode.none, 0)
    assert leader.produce(5, 0, 3, 2, txn=False) == (ErrorCode.none, 3)
    replicate(leader, follower, 1 << 20)
    # The producer's retry of its last batch reaches the new leader: same offset, not appended.
    assert follower.produce(5, 0, 3, 2, txn=False) == (ErrorCode.none, 3)
    assert follower.log.log_end_offset == 5
    assert follower.produce(5, 0, 9, 1, txn=False)[0] == ErrorCode.out_of_order_sequence_number
    leader.close()
    follower.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(common=_OPS, ours=_OPS, theirs=_OPS)
def test_truncate_then_reappend_equals_never_having_diverged(
        common: list[tuple[str, int, int]], ours: list[tuple[str, int, int]],
        theirs: list[tuple[str, int, int]]) -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        a = Node.open(Path(tmp) / "a", clock)
        b = Node.open(Path(tmp) / "b", clock, segment_bytes=1024)
        seqs: dict[int, int] = {}
        run(a, common, seqs)
        replicate(a, b, 1 << 20)
        point = a.log.log_end_offset
        # B leads for a while (its own appends, snapshots at its rolls), then A's tail wins.
        run(b, ours, dict(seqs))
        run(a, theirs, seqs)
        assert replica(b).truncate_to(P, 0, point) == min(point, b.log.log_end_offset)
        assert all(o <= point for o in list_snapshots(b.log.directory))
        replicate(a, b, 1 << 20)
        assert records(b) == records(a)
        assert derived(b) == derived(a)
        a.close()
        b.close()
        # And after a restart (snapshots and replay) the follower still agrees.
        b2 = Node.open(Path(tmp) / "b", clock, segment_bytes=1024)
        a2 = Node.open(Path(tmp) / "a", clock)
        assert derived(b2)[:4] == derived(a2)[:4]
        a2.close()
        b2.close()


def test_truncation_rewinds_an_open_transaction_and_an_abort(tmp_path: Path,
                                                             clock: FakeClock) -> None:
    node = Node.open(tmp_path / "b", clock)
    assert node.produce(1, 0, 0, 2) == (ErrorCode.none, 0)  # txn of 1 at 0-1
    assert node.marker(1, 0, commit=False) == ErrorCode.none  # ABORT at 2
    assert node.produce(2, 0, 0, 2) == (ErrorCode.none, 3)  # txn of 2 at 3-4, open
    for seq in range(2, 40, 2):
        node.produce(2, 0, seq, 2)
    assert node.lso() == 3 and [a.producer_id for a in node.aborted()] == [1]
    assert max(list_snapshots(node.log.directory)) > 2  # rolls wrote snapshots past offset 2
    assert replica(node).truncate_to(P, 0, 2) == 2
    assert node.lso() == 0  # producer 1's transaction is open again: its marker went
    assert node.ongoing() == {1: 0}
    assert node.aborted() == []
    assert node.log.first_unstable_offset == 0
    assert all(o <= 2 for o in list_snapshots(node.log.directory))
    # Producer 2's batch was cut: its sequence 0 is new again, not a duplicate.
    assert node.produce(2, 0, 0, 2) == (ErrorCode.none, 2)
    node.close()


def test_async_truncation_rewinds_like_the_blocking_one(tmp_path: Path,
                                                        clock: FakeClock) -> None:
    nodes = [Node.open(tmp_path / name, clock) for name in ("sync", "async")]
    for node in nodes:
        assert node.produce(1, 0, 0, 2) == (ErrorCode.none, 0)
        assert node.marker(1, 0, commit=False) == ErrorCode.none
        for seq in range(0, 40, 2):
            node.produce(2, 0, seq, 2)
    assert replica(nodes[0]).truncate_to(P, 0, 9) == 9
    assert asyncio.run(replica(nodes[1]).truncate_to_async(P, 0, 9)) == 9
    assert derived(nodes[1]) == derived(nodes[0])
    assert list_snapshots(nodes[1].log.directory) == list_snapshots(nodes[0].log.directory)
    asyncio.run(replica(nodes[1]).truncate_fully_async(P, 0, 50))
    replica(nodes[0]).truncate_fully(P, 0, 50)
    assert derived(nodes[1]) == derived(nodes[0])
    assert list_snapshots(nodes[1].log.directory) == []
    for node in nodes:
        node.close()


def test_truncate_fully_starts_over_with_no_producer_state(tmp_path: Path,
                                                           clock: FakeClock) -> None:
    node = Node.open(tmp_path / "b", clock)
    for seq in range(0, 40, 2):
        node.produce(7, 0, seq, 2, txn=False)
    node.produce(8, 0, 0, 1)
    replica(node).truncate_fully(P, 0, 100)
    assert (node.log.log_start_offset, node.log.log_end_offset) == (100, 100)
    assert list_snapshots(node.log.directory) == []
    assert node.ongoing() == {} and node.lso() == 100
    assert len(node.producers.states(P, 0)) == 0
    node.close()
    again = Node.open(tmp_path / "b", clock)
    assert len(again.producers.states(P, 0)) == 0 and again.lso() == 100
    again.close()


def test_follower_append_refusals(tmp_path: Path, clock: FakeClock) -> None:
    leader = Node.open(tmp_path / "a", clock)
    follower = Node.open(tmp_path / "b", clock)
    leader.produce(1, 0, 0, 2, txn=False)
    data = leader.log.read(0, 1 << 20).data
    rl = replica(follower)
    rl.append(P, 0, data)
    with pytest.raises(UnexpectedOffsetError):
        rl.append(P, 0, data)
    with pytest.raises(NoReplicaError, match="nope-0 has no log"):
        rl.append("nope", 0, data)
    with pytest.raises(NoReplicaError):
        rl.truncate_to("nope", 0, 0)
    assert rl.truncate_to(P, 0, 9) == 2  # at or past the end: nothing to do
    leader.close()
    follower.close()


def test_follower_append_wakes_waiting_fetches(tmp_path: Path, clock: FakeClock) -> None:
    leader = Node.open(tmp_path / "a", clock)
    follower = Node.open(tmp_path / "b", clock)
    leader.produce(1, 0, 0, 2, txn=False)
    data = leader.log.read(0, 1 << 20).data

    async def main() -> bool:
        fut = follower.logs.watch.watch([(P, 0)])
        replica(follower).append(P, 0, data)
        return fut.done()

    assert asyncio.run(main())
    leader.close()
    follower.close()
