"""The network persister's sans-IO core (persister/network_batcher.py), driven with a fake clock.

Batching per destination broker (one flush in flight per (broker, RPC), later calls coalesce into
the next), per-key results, retries of NOT_COORDINATOR and lost connections with exponential
backoff to the re-resolved leader, the deadline (Kafka's code after it, not before), per-key order,
and a dead broker not holding back calls to another.
"""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.share.service import StateOp
from persister.api import PersisterStateBatch, SharePartitionKey, WriteParams, WriteResult
from persister.network_batcher import Done, StateBatcher

E = ErrorCode
TOPIC = uuid.UUID(int=7)


def key(p: int, group: str = "g") -> SharePartitionKey:
    return SharePartitionKey(group, TOPIC, p)


def write(p: int, start: int = 0, group: str = "g") -> WriteParams:
    return WriteParams(key(p, group), 0, 0, start, -1,
                       (PersisterStateBatch(start, start + 1, 2, 1),))


def ok(n: int) -> list[tuple[ErrorCode, str | None, WriteResult]]:
    return [(E.none, None, WriteResult(E.none))] * n


def batcher(routes: dict[int, int | None] | None = None, **kw: int) -> StateBatcher:
    """Partition p of the topic goes to routes.get(p, 1)."""
    table = routes if routes is not None else {}
    return StateBatcher(lambda k: table.get(k.partition, 1), rand=lambda: 0.5, **kw)


def test_calls_coalesce_while_a_write_to_the_same_broker_is_in_flight() -> None:
    b = batcher()
    first = b.submit(StateOp.WRITE, write(0), 0)
    (s1,) = b.sends(0)
    assert (s1.node_id, s1.op, s1.call_ids) == (1, StateOp.WRITE, (first,))
    later = [b.submit(StateOp.WRITE, write(p), 1) for p in range(1, 11)]
    assert b.sends(1) == []  # the flush in flight holds them
    assert b.in_flight(1) == {StateOp.WRITE}
    b.on_results(s1.send_id, ok(1), 5)
    (s2,) = b.sends(5)
    assert s2.call_ids == tuple(later) and [p.key.partition for p in s2.params] == list(range(1, 11))
    b.on_results(s2.send_id, [(E.none, None, WriteResult(E.none))] * 9
                 + [(E.fenced_state_epoch, "old", WriteResult(E.fenced_state_epoch, "old"))], 9)
    done = {d.call_id: d.error for d in b.completed()}
    assert done == {first: E.none, **{c: E.none for c in later[:-1]}, later[-1]: E.fenced_state_epoch}
    assert b.outstanding == 0 and b.in_flight(1) == frozenset()


def test_one_request_per_group_and_per_rpc_kind_in_a_flush() -> None:
    b = batcher()
    b.submit(StateOp.WRITE, write(0, group="a"), 0)
    b.submit(StateOp.WRITE, write(1, group="b"), 0)
    b.submit(StateOp.WRITE, write(2, group="a"), 0)
    b.submit(StateOp.DELETE, write(3, group="a"), 0)
    sends = sorted(b.sends(0), key=lambda s: (s.op.value, s.group_id))
    assert [(s.op, s.group_id, len(s.call_ids)) for s in sends] == [
        (StateOp.WRITE, "a", 2), (StateOp.WRITE, "b", 1), (StateOp.DELETE, "a", 1)]


def test_not_coordinator_is_retried_after_backoff_at_the_new_leader() -> None:
    routes: dict[int, int | None] = {0: 1}
    b = batcher(routes, backoff_ms=100, backoff_max_ms=1000)
    c = b.submit(StateOp.WRITE, write(0), 0)
    (s,) = b.sends(0)
    routes[0] = 2  # leadership moved
    b.on_results(s.send_id, [(E.not_coordinator, "moved", WriteResult(E.not_coordinator))], 10)
    assert b.completed() == [] and b.sends(10) == []
    assert b.next_deadline() == 110
    b.on_timer(109)
    assert b.sends(109) == []
    b.on_timer(110)
    (s2,) = b.sends(110)
    assert s2.node_id == 2 and s2.call_ids == (c,)
    b.on_results(s2.send_id, ok(1), 120)
    assert [d.error for d in b.completed()] == [E.none]


def test_backoff_doubles_up_to_its_maximum() -> None:
    b = batcher(backoff_ms=100, backoff_max_ms=300, deadline_ms=10_000)
    b.submit(StateOp.WRITE, write(0), 0)
    now, delays = 0, []
    for _ in range(4):
        (s,) = b.sends(now)
        b.on_failure(s.send_id, E.network_exception, "refused", now)
        due = b.next_deadline()
        assert due is not None
        delays.append(due - now)
        now = due
        b.on_timer(now)
    assert delays == [100, 200, 300, 300]


def test_a_call_fails_with_the_last_error_once_its_deadline_passes_not_before() -> None:
    b = batcher({0: None}, deadline_ms=1000, backoff_ms=100, backoff_max_ms=200)
    c = b.submit(StateOp.WRITE, write(0), 0)
    now = 0
    while (due := b.next_deadline()) is not None:
        assert b.completed() == []
        now = due
        b.on_timer(now)
        assert b.sends(now) == []
    assert now == 1000
    (d,) = b.completed()
    assert (d.call_id, d.error, d.result) == (c, E.coordinator_not_available, None)
    assert "1000 ms" in (d.message or "")


def test_connection_loss_is_retried_and_gives_network_exception_at_the_deadline() -> None:
    b = batcher(deadline_ms=500, backoff_ms=100, backoff_max_ms=100)
    b.submit(StateOp.READ_SUMMARY, write(0), 0)
    now = 0
    while True:
        for s in b.sends(now):
            b.on_failure(s.send_id, E.network_exception, "connection refused", now)
        due = b.next_deadline()
        if due is None:
            break
        now = due
        b.on_timer(now)
    (d,) = b.completed()
    assert d.error == E.network_exception and now == 500


def test_a_dead_broker_does_not_hold_back_calls_to_another() -> None:
    b = batcher({0: 1, 1: 2})
    to_dead = b.submit(StateOp.WRITE, write(0), 0)
    to_live = b.submit(StateOp.WRITE, write(1), 0)
    sends = {s.node_id: s for s in b.sends(0)}
    assert set(sends) == {1, 2}
    b.on_results(sends[2].send_id, ok(1), 3)  # broker 1 has not answered (yet)
    assert b.completed() == [Done(to_live, StateOp.WRITE, E.none, None, WriteResult(E.none))]
    # A second call to the live broker goes out although broker 1 still holds its flush.
    again = b.submit(StateOp.WRITE, write(1, start=5), 4)
    (s,) = b.sends(4)
    assert s.node_id == 2 and s.call_ids == (again,)
    b.on_results(s.send_id, ok(1), 5)
    assert [d.call_id for d in b.completed()] == [again]
    # The dead broker's request times out at the call's deadline; the call ends with that code.
    b.on_failure(sends[1].send_id, E.request_timed_out, "no answer", 30_000)
    b.on_timer(30_000)
    assert [(d.call_id, d.error) for d in b.completed()] == [(to_dead, E.request_timed_out)]


def test_calls_for_one_key_run_in_order_and_never_share_a_request() -> None:
    b = batcher()
    w1 = b.submit(StateOp.WRITE, write(0, start=1), 0)
    w2 = b.submit(StateOp.WRITE, write(0, start=2), 0)
    (s,) = b.sends(0)
    assert s.call_ids == (w1,)
    b.on_results(s.send_id, [(E.coordinator_load_in_progress, None, None)], 1)
    b.on_timer(1_000)
    (s,) = b.sends(1_000)
    assert s.call_ids == (w1,)  # the retried write still goes first
    b.on_results(s.send_id, ok(1), 1_001)
    (s,) = b.sends(1_001)
    assert s.call_ids == (w2,) and s.params[0].start_offset == 2
    b.on_results(s.send_id, ok(1), 1_002)
    assert [d.call_id for d in b.completed()] == [w1, w2]


def test_calls_whose_deadline_passed_behind_a_flush_fail_instead_of_being_sent() -> None:
    b = batcher(deadline_ms=1000)
    b.submit(StateOp.WRITE, write(0), 0)
    (s,) = b.sends(0)
    late = b.submit(StateOp.WRITE, write(1), 10)
    b.on_results(s.send_id, ok(1), 1_500)
    assert b.sends(1_500) == []
    assert [(d.call_id, d.error) for d in b.completed()][-1] == (late, E.request_timed_out)


def test_a_non_retriable_transport_error_ends_every_call_of_the_request() -> None:
    b = batcher()
    calls = [b.submit(StateOp.READ, write(p), 0) for p in range(3)]
    (s,) = b.sends(0)
    b.on_failure(s.send_id, E.sasl_authentication_failed, "bad password", 1)
    assert [(d.call_id, d.error) for d in b.completed()] == [
        (c, E.sasl_authentication_failed) for c in calls]


def test_a_flush_carries_at_most_max_keys_per_request_per_group() -> None:
    b = batcher(max_keys_per_request=4)
    calls = [b.submit(StateOp.WRITE, write(p), 0) for p in range(10)]
    sizes = []
    while b.outstanding:
        (s,) = b.sends(1)
        sizes.append(len(s.call_ids))
        b.on_results(s.send_id, ok(len(s.call_ids)), 1)
    assert sizes == [4, 4, 2]
    assert [d.call_id for d in b.completed()] == calls


def test_request_timeout_never_outlasts_the_calls_deadline() -> None:
    b = batcher(deadline_ms=2000, request_timeout_ms=30_000)
    b.submit(StateOp.WRITE, write(0), 0)
    (s,) = b.sends(500)
    assert s.timeout_ms == 1500


@pytest.mark.parametrize("bad", [{"deadline_ms": 0}, {"backoff_ms": -1},
                                 {"request_timeout_ms": 0}, {"max_keys_per_request": 0}])
def test_bounds_are_checked(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        batcher(**bad)
