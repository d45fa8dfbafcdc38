"""The transaction RPCs between brokers: backoff on an injected clock, grouping per broker, the
requests and answers, and the marker writer's batching (one WriteTxnMarkers per broker per
flush, retried at the new leader)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.txn_remote import ClusterMarkers, TxnCoordinatorLink
from broker.txn_wire import (
    Backoff,
    MarkerEntry,
    add_partitions_request,
    add_partitions_results,
    group_by_node,
    marker_results,
    write_txn_markers_request,
)
from protocol.codec import response_module
from protocol.messages import make


def test_backoff_doubles_up_to_its_cap_and_stops_at_the_deadline() -> None:
    b = Backoff(now_ms=1_000, budget_ms=1_000, first_ms=100, max_ms=300)
    assert b.next_delay(1_000) == 100
    assert b.next_delay(1_100) == 200
    assert b.next_delay(1_300) == 300
    assert b.next_delay(1_600) == 300
    assert b.next_delay(1_900) == 100  # cut to end at the deadline: one last attempt
    assert b.next_delay(2_000) is None
    assert b.attempts == 6


def test_backoff_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(0, -1)
    with pytest.raises(ValueError):
        Backoff(0, 10, first_ms=0)


def _entry(topic: str, p: int, pid: int = 7, commit: bool = True) -> MarkerEntry:
    return MarkerEntry(topic, p, pid, 3, 0, commit)


def test_markers_are_grouped_by_leader_and_offline_partitions_set_aside() -> None:
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1, ("b", 1): None}
    entries = [_entry("a", 0), _entry("a", 1), _entry("b", 0), _entry("b", 1)]
    by_node, orphans = group_by_node(entries, lambda t, p: leaders[(t, p)])
    assert by_node == {1: [entries[0], entries[2]], 2: [entries[1]]}
    assert orphans == [entries[3]]


def test_one_request_carries_every_marker_and_its_answer_maps_back() -> None:
    entries = [_entry("a", 0), _entry("a", 1), _entry("b", 0), _entry("a", 0, pid=9, commit=False)]
    req = write_txn_markers_request(entries, 1)
    assert [(m.producer_id, m.transaction_result, [(t.name, list(t.partition_indexes))
                                                   for t in m.topics]) for m in req.markers] == [
        (7, True, [("a", [0, 1]), ("b", [0])]), (9, False, [("a", [0])])]
    m = response_module(27, 1)
    resp = make(m.WriteTxnMarkersResponse, markers=(
        make(m.WritableTxnMarkerResult, producer_id=7, topics=(
            make(m.WritableTxnMarkerTopicResult, name="a", partitions=(
                make(m.WritableTxnMarkerPartitionResult, partition_index=0,
                     error_code=ErrorCode.none),
                make(m.WritableTxnMarkerPartitionResult, partition_index=1,
                     error_code=ErrorCode.not_leader_or_follower))),)),))
    assert marker_results(entries, resp) == [
        ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.unknown_server_error,
        ErrorCode.unknown_server_error]


def test_add_partitions_request_and_its_answer() -> None:
    parts = [("a", 0), ("a", 2), ("b", 1)]
    req = add_partitions_request("tx", 5, 1, parts, True, 4)
    (txn,) = req.transactions
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.verify_only) == \
        ("tx", 5, 1, True)
    assert [(t.name, list(t.partitions)) for t in txn.topics] == [("a", [0, 2]), ("b", [1])]
    m = response_module(24, 4)
    refused = make(m.AddPartitionsToTxnResponse, throttle_time=0,
                   error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
    assert set(add_partitions_results(parts, "tx", refused).values()) == {
        ErrorCode.cluster_authorization_failed}
    ok = make(m.AddPartitionsToTxnResponse, throttle_time=0, error_code=ErrorCode.none,
              results_by_transaction=(make(m.AddPartitionsToTxnResult, transactional_id="tx",
                                           topic_results=(make(
                                               m.AddPartitionsToTxnTopicResult, name="a",
                                               results_by_partition=tuple(
                                                   make(m.AddPartitionsToTxnPartitionResult,
                                                        partition_index=i,
                                                        partition_error_code=c)
                                                   for i, c in ((0, ErrorCode.none),
                                                                (2, ErrorCode.transaction_abortable)))),)),))
    assert add_partitions_results(parts, "tx", ok) == {
        ("a", 0): ErrorCode.none, ("a", 2): ErrorCode.transaction_abortable,
        ("b", 1): ErrorCode.unknown_server_error}


class FakeRpc:
    """Leaders by partition; answers WriteTxnMarkers with ``answer(node, entries)``."""

    node_id = 1

    def __init__(self, leaders: dict[tuple[str, int], int | None]) -> None:
        self.leaders = leaders
        self.sent: list[tuple[int, Any]] = []
        self.answer: Any = lambda node, req: None

    def leader(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    async def send(self, node_id: int, api_key: int, versions: tuple[int, int], build: Any,
                   timeout_ms: int | None = None) -> tuple[Any, ErrorCode, str]:
        req = build(versions[1])
        self.sent.append((node_id, req))
        out = self.answer(node_id, req)
        if out is None:
            return None, ErrorCode.network_exception, "down"
        return out, ErrorCode.none, ""


def _all(req: Any, code: ErrorCode) -> Any:
    m = response_module(27, 2)
    return make(m.WriteTxnMarkersResponse, markers=tuple(
        make(m.WritableTxnMarkerResult, producer_id=mk.producer_id, topics=tuple(
            make(m.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                make(m.WritableTxnMarkerPartitionResult, partition_index=p, error_code=code)
                for p in t.partition_indexes)) for t in mk.topics)) for mk in req.markers))


class LocalWriter:
    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []

    async def write_marker(self, topic: str, partition: int, *_: Any) -> ErrorCode:
        self.written.append((topic, partition))
        return ErrorCode.none


async def test_a_transactions_markers_cost_one_request_per_remote_broker() -> None:
    rpc = FakeRpc({("a", 0): 1, ("a", 1): 2, ("a", 2): 3, ("a", 3): 2, ("__consumer_offsets", 4): 3})
    rpc.answer = lambda node, req: _all(req, ErrorCode.none)
    local = LocalWriter()
    offsets: list[int] = []

    async def offset_marker(p: int, *_: Any) -> ErrorCode:
        offsets.append(p)
        return ErrorCode.none

    markers = ClusterMarkers(rpc, local, lambda: offset_marker)  # type: ignore[arg-type]
    codes = await asyncio.gather(*(markers.write_marker("a", p, 7, 1, 0, True) for p in range(4)),
                                 markers.offset_marker(4, 7, 1, 0, True))
    assert codes == [ErrorCode.none] * 5
    assert local.written == [("a", 0)] and offsets == []  # led here: in process
    assert sorted(n for n, _ in rpc.sent) == [2, 3]
    by_node = {n: [(t.name, list(t.partition_indexes)) for mk in r.markers for t in mk.topics]
               for n, r in rpc.sent}
    assert by_node == {2: [("a", [1, 3])], 3: [("a", [2]), ("__consumer_offsets", [4])]}


async def test_a_marker_follows_its_partition_to_the_new_leader() -> None:
    rpc = FakeRpc({("a", 1): 2})
    now = [0]

    def answer(node: int, req: Any) -> Any:
        if node == 2:
            rpc.leaders[("a", 1)] = 3  # moved: broker 2 says so
            return _all(req, ErrorCode.not_leader_or_follower)
        return _all(req, ErrorCode.none)

    rpc.answer = answer
    markers = ClusterMarkers(rpc, LocalWriter(), lambda: None, backoff_ms=1,  # type: ignore[arg-type]
                             clock_ms=lambda: now[0])
    assert await markers.write_marker("a", 1, 7, 1, 0, False) == ErrorCode.none
    assert [n for n, _ in rpc.sent] == [2, 3]


async def test_a_broker_down_past_the_deadline_leaves_a_retriable_code() -> None:
    rpc = FakeRpc({("a", 1): 2})
    now = [0]

    def down(node: int, req: Any) -> None:
        now[0] += 400  # each attempt costs time on the injected clock
        return None

    rpc.answer = down
    markers = ClusterMarkers(rpc, LocalWriter(), lambda: None, marker_deadline_ms=1_000,  # type: ignore[arg-type]
                             backoff_ms=1, clock_ms=lambda: now[0])
    assert await markers.write_marker("a", 1, 7, 1, 0, True) == ErrorCode.request_timed_out
    assert 2 <= len(rpc.sent) <= 4


class LocalTxns:
    def partition_for(self, transactional_id: str) -> int:
        return 0

    def verify_partition(self, *_: Any) -> ErrorCode:
        return ErrorCode.none

    async def add_partitions(self, *_: Any, client_tv: int | None = None) -> ErrorCode:
        return ErrorCode.none


async def test_verification_retries_a_moving_coordinator_then_answers_its_code() -> None:
    rpc = FakeRpc({("__transaction_state", 0): 2})
    m = response_module(24, 5)
    answers = [ErrorCode.not_coordinator, ErrorCode.transaction_abortable]

    def send(node: int, req: Any) -> Any:
        code = answers.pop(0)
        return make(m.AddPartitionsToTxnResponse, throttle_time=0, error_code=ErrorCode.none,
                    results_by_transaction=(make(
                        m.AddPartitionsToTxnResult, transactional_id="tx", topic_results=(
                            make(m.AddPartitionsToTxnTopicResult, name="a", results_by_partition=(
                                make(m.AddPartitionsToTxnPartitionResult, partition_index=0,
                                     partition_error_code=code),)),)),))

    rpc.answer = send
    link = TxnCoordinatorLink(rpc, LocalTxns, backoff_ms=1, clock_ms=lambda: 0)  # type: ignore[arg-type]
    assert await link.verify("tx", 5, 0, [("a", 0)]) == {("a", 0): ErrorCode.transaction_abortable}
    assert len(rpc.sent) == 2 and rpc.sent[0][1].transactions[0].verify_only
    rpc.leaders[("__transaction_state", 0)] = 1  # now this broker: answered in process
    assert await link.add("tx", 5, 0, [("a", 0)]) == ErrorCode.none
    assert len(rpc.sent) == 2


async def test_a_leader_refusing_this_broker_never_lets_the_transaction_complete() -> None:
    rpc = FakeRpc({("a", 1): 2})
    now = [0]

    def refused(node: int, req: Any) -> Any:
        now[0] += 300
        return _all(req, ErrorCode.cluster_authorization_failed)

    rpc.answer = refused
    markers = ClusterMarkers(rpc, LocalWriter(), lambda: None, marker_deadline_ms=1_000,  # type: ignore[arg-type]
                             backoff_ms=1, clock_ms=lambda: now[0])
    # Retriable for the coordinator: the transaction stays prepared until it is fixed.
    assert await markers.write_marker("a", 1, 7, 1, 0, True) == ErrorCode.request_timed_out
    assert len(rpc.sent) > 1


class FakeMetadata:
    node_id = 1

    def node(self, node_id: int, listener: str) -> Any:
        from cluster.metadata import Node
        return Node(node_id, "127.0.0.1", 9000 + node_id, None) if node_id != 4 else None


class FailingTransport:
    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure

    async def request(self, node_id: int, host: str, port: int, api_key: int, lo: int, hi: int,
                      build: Any, timeout: float | None = None) -> tuple[int, Any]:
        if self.failure is not None:
            raise self.failure
        return hi, build(hi)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(("failure", "code"), [
    (TimeoutError(), ErrorCode.request_timed_out),
    (ConnectionRefusedError("refused"), ErrorCode.network_exception),
    (None, ErrorCode.none),
])
async def test_an_inter_broker_request_ends_in_a_kafka_code_and_is_counted(
        failure: BaseException | None, code: ErrorCode) -> None:
    from broker.inter_broker_rpc import InterBrokerRpc

    rpc = InterBrokerRpc(FakeMetadata(), FailingTransport(failure),  # type: ignore[arg-type]
                         listener="INTERNAL")
    response, got, message = await rpc.send(2, 27, (1, 2), lambda v: v)
    assert got == code and (response is None) == (code != ErrorCode.none)
    assert "broker 2 (127.0.0.1:9002)" in message or code == ErrorCode.none
    stats = rpc.stats()
    assert stats["requests"] == {(27, 2): 1}
    assert stats["errors"] == ({} if code == ErrorCode.none else {(27, 2, code.name.upper()): 1})
    # A broker without an endpoint on the listener (not live) is not even dialled.
    assert (await rpc.send(4, 27, (1, 2), lambda v: v))[1] == ErrorCode.coordinator_not_available
