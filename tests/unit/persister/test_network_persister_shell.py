"""persister/network_persister.py, the asyncio shell, over a fake transport function.

The transport answers from a dict of written start offsets, and can hold a request until
released or fail like a lost connection. Shown: calls made together share one request, calls
made while it is in flight share the next, each caller gets its own key's answer only after the
response; a lost connection is retried; routing follows the metadata; close() answers whoever
still waits; the counters count what went over the wire.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.metadata import LocalMetadata
from coordinator.share.service import StateOp
from persister.api import ReadParams, SharePartitionKey, WriteParams
from persister.network_persister import NetworkPersister
from protocol.codec import response_module
from protocol.messages import make

TOPIC = uuid.UUID(int=3)
WRITE, SUMMARY = StateOp.WRITE.value, StateOp.READ_SUMMARY.value


class FakeTransport:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int, Any]] = []  # (node, api key, request)
        self.state: dict[tuple[uuid.UUID, int], int] = {}
        self.hold: asyncio.Event | None = None
        self.fail_next: list[BaseException] = []
        self.closed = False

    async def request(self, node_id: int, host: str, port: int, api_key: int, lo: int, hi: int,
                      build: Callable[[int], Any], timeout: float | None = None) -> tuple[int, Any]:
        body = build(hi)
        self.sent.append((node_id, api_key, body))
        if self.fail_next:
            raise self.fail_next.pop(0)
        if self.hold is not None:
            await self.hold.wait()
        m = response_module(api_key, hi)
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                if api_key == WRITE:
                    self.state[(t.topic_id, p.partition)] = p.start_offset
                    parts.append(make(m.PartitionResult, partition=p.partition, error_code=0,
                                      error_message=None))
                else:
                    parts.append(make(m.PartitionResult, partition=p.partition, error_code=0,
                                      error_message=None, state_epoch=0, leader_epoch=0,
                                      start_offset=self.state.get((t.topic_id, p.partition), -1),
                                      delivery_complete_count=-1))
            results.append(make(getattr(m, "WriteStateResult" if api_key == WRITE
                                        else "ReadStateSummaryResult"),
                                topic_id=t.topic_id, partitions=tuple(parts)))
        name = ("WriteShareGroupStateResponse" if api_key == WRITE
                else "ReadShareGroupStateSummaryResponse")
        return hi, make(getattr(m, name), results=tuple(results))

    async def close(self) -> None:
        self.closed = True


def persister(t: FakeTransport, **kw: Any) -> NetworkPersister:
    metadata = LocalMetadata(7, {"BROKER": ("127.0.0.1", 1)},
                             lambda topic: 50 if topic == "__share_group_state" else None)
    return NetworkPersister(metadata, t, listener="BROKER", num_partitions=50,
                            backoff_ms=1, backoff_max_ms=2, **kw)


async def settle() -> None:
    """Let the loop run what is ready (the pump, the send tasks) without waiting on time."""
    for _ in range(20):
        await asyncio.sleep(0)


def write(p: int, start: int) -> WriteParams:
    return WriteParams(SharePartitionKey("g", TOPIC, p), 0, 0, start, -1, ())


async def test_calls_share_requests_and_each_gets_its_own_answer_after_the_response() -> None:
    t = FakeTransport()
    t.hold = asyncio.Event()
    p = persister(t)
    first = [asyncio.create_task(p.write(write(i, 10 + i))) for i in range(3)]
    await settle()
    assert len(t.sent) == 1 and not any(f.done() for f in first)  # held: nobody is answered
    later = [asyncio.create_task(p.write(write(i, 20 + i))) for i in range(3, 9)]
    await settle()
    assert len(t.sent) == 1  # they wait for the flush in flight
    t.hold.set()
    assert [r.error for r in await asyncio.gather(*first, *later)] == [ErrorCode.none] * 9
    assert [len(body.topics[0].partitions) for _n, _k, body in t.sent] == [3, 6]
    assert {n for n, _k, _b in t.sent} == {7}
    summaries = await asyncio.gather(*(p.read_summary(ReadParams(write(i, 0).key, 0))
                                       for i in range(9)))
    assert [s.start_offset for s in summaries] == [10, 11, 12, 23, 24, 25, 26, 27, 28]
    stats = p.stats()
    assert stats["requests"] == {(WRITE, 7): 2, (SUMMARY, 7): 1}
    assert stats["max_in_flight"][(WRITE, 7)] == 1
    assert stats["latency_count"][(WRITE, 7)] == 2
    await p.close()
    assert t.closed


async def test_a_lost_connection_is_retried() -> None:
    t = FakeTransport()
    t.fail_next = [ConnectionResetError("reset by peer"), OSError("no route")]
    p = persister(t)
    assert (await p.write(write(0, 5))).error == ErrorCode.none
    assert len(t.sent) == 3
    assert p.stats()["errors"] == {(WRITE, 7, "NETWORK_EXCEPTION"): 2}
    await p.close()


async def test_a_call_without_a_coordinator_fails_after_its_deadline() -> None:
    t = FakeTransport()
    metadata = LocalMetadata(7, {"OTHER": ("127.0.0.1", 1)}, lambda topic: 50)
    p = NetworkPersister(metadata, t, listener="BROKER", num_partitions=50, deadline_ms=50,
                         backoff_ms=5, backoff_max_ms=10)
    result = await p.write(write(0, 5))
    assert result.error == ErrorCode.coordinator_not_available and t.sent == []
    assert p.stats()["failed_calls"] == {(WRITE, "COORDINATOR_NOT_AVAILABLE"): 1}
    await p.close()


async def test_close_answers_the_callers_still_waiting() -> None:
    t = FakeTransport()
    t.hold = asyncio.Event()
    p = persister(t)
    waiting = asyncio.create_task(p.write(write(0, 5)))
    await settle()
    await p.close()
    assert (await waiting).error == ErrorCode.coordinator_not_available
    assert (await p.write(write(1, 5))).error == ErrorCode.coordinator_not_available
