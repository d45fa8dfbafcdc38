"""A cluster member's reads and writes at other partition leaders: the dead-letter Produce and the
ListOffsets behind share-group lag (the wire shapes, one request per leading broker, and the
answers a user's tools see when a leader is away)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.share.dead_letter_remote import append_remote
from broker.share.remote_offsets import end_offsets_of, list_offsets_request, log_end_offsets
from protocol.codec import response_module
from protocol.messages import make


class FakeRpc:
    node_id = 1
    request_timeout_ms = 5_000

    def __init__(self, leaders: dict[tuple[str, int], int | None], answer: Any) -> None:
        self.leaders = leaders
        self.answer = answer
        self.sent: list[tuple[int, int, Any]] = []

    def leader(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    async def send(self, node_id: int, api_key: int, versions: tuple[int, int], build: Any,
                   timeout_ms: int | None = None) -> tuple[Any, ErrorCode, str]:
        req = build(versions[1])
        self.sent.append((node_id, versions[1], req))
        out = self.answer(node_id, versions[1], req)
        if out is None:
            return None, ErrorCode.network_exception, f"broker {node_id} is unreachable"
        return out, ErrorCode.none, ""


def _list_offsets_answer(version: int, req: Any, end: int, refused: set[int] = frozenset()
                         ) -> Any:
    m = response_module(2, version)
    return make(m.ListOffsetsResponse, throttle_time=0, topics=tuple(
        make(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(
            make(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                 error_code=ErrorCode.not_leader_or_follower if p.partition_index in refused
                 else ErrorCode.none, timestamp=-1,
                 offset=end + p.partition_index, leader_epoch=0)
            for p in t.partitions)) for t in req.topics))


def test_list_offsets_asks_for_the_latest_offset_and_keeps_only_answered_partitions() -> None:
    req = list_offsets_request([("a", 0), ("a", 2), ("b", 1)], 7)
    assert [(t.name, [(p.partition_index, p.timestamp) for p in t.partitions])
            for t in req.topics] == [("a", [(0, -1), (2, -1)]), ("b", [(1, -1)])]
    assert end_offsets_of(_list_offsets_answer(7, req, 100, refused={2})) == {
        ("a", 0): 100, ("b", 1): 101}


async def test_log_end_offsets_cost_one_request_per_leading_broker() -> None:
    rpc = FakeRpc({("a", 0): 2, ("a", 1): 3, ("a", 2): 2, ("a", 3): None},
                  lambda node, v, req: _list_offsets_answer(v, req, 10 * node) if node == 2
                  else None)
    got = await log_end_offsets(rpc, [("a", 0), ("a", 1), ("a", 2), ("a", 3)])  # type: ignore[arg-type]
    assert got == {("a", 0): 20, ("a", 2): 22}  # broker 3 unreachable, partition 3 offline
    assert sorted(n for n, _v, _r in rpc.sent) == [2, 3]


async def test_a_dead_letter_batch_is_produced_with_acks_all_to_the_leader() -> None:
    def answer(node: int, version: int, req: Any) -> Any:
        assert req.acks == -1 and req.transactional_id is None
        (t,) = req.topic_data
        (p,) = t.partition_data
        assert (t.name, p.index, p.records) == ("dlq.x", 1, b"batch")
        m = response_module(0, version)
        return make(m.ProduceResponse, throttle_time=0, node_endpoints=(), responses=(
            make(m.TopicProduceResponse, name="dlq.x", partition_responses=(
                make(m.PartitionProduceResponse, index=1, error_code=ErrorCode.none,
                     base_offset=42, log_append_time=None, log_start_offset=0,
                     record_errors=(), error_message=None),)),))

    rpc = FakeRpc({}, answer)
    out = await append_remote(rpc, 3, "dlq.x", 1, b"batch")  # type: ignore[arg-type]
    assert (out.error, out.base_offset) == (ErrorCode.none, 42)


async def test_a_dead_letter_leader_away_answers_a_retriable_code() -> None:
    rpc = FakeRpc({}, lambda node, v, req: None)
    out = await append_remote(rpc, 3, "dlq.x", 1, b"batch")  # type: ignore[arg-type]
    assert out.error == ErrorCode.network_exception and "unreachable" in (out.message or "")
    offline = await append_remote(rpc, -1, "dlq.x", 1, b"batch")  # type: ignore[arg-type]
    assert offline.error == ErrorCode.leader_not_available
    assert len(rpc.sent) == 1
