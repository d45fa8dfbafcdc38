"""TxnShard: the transaction state machine, sans IO (Kafka TransactionCoordinatorTest cases)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from coordinator.txn.metadata import (
    IllegalTransitionError,
    TxnMetadata,
    TxnState,
    check_transition,
)
from coordinator.txn.shard import ProducerIdAndEpoch
from tests.unit.coordinator.txn.support import T0, TxnContext

S = TxnState


def started(ctx: TxnContext, txn: str = "t") -> tuple[int, int]:
    out = ctx.init(txn)
    assert out.error is E.none
    assert ctx.add(txn, out.producer_id, out.producer_epoch, ("orders", 0), ("orders", 1)) is E.none
    return out.producer_id, out.producer_epoch


def test_a_new_id_gets_a_producer_id_and_epoch_0_written_as_empty() -> None:
    ctx = TxnContext()
    out = ctx.init("t", 30_000)
    assert out == ProducerIdAndEpoch(E.none, 1001, 0)
    assert ctx.shard.txns["t"] == TxnMetadata("t", 1001, 0, 30_000, S.EMPTY, last_update_ms=T0)
    assert len(ctx.log) == 1


def test_reinit_bumps_the_epoch_and_keeps_the_producer_id() -> None:
    ctx = TxnContext()
    ctx.init("t")
    assert ctx.init("t") == ProducerIdAndEpoch(E.none, 1001, 1)
    assert ctx.init("t", expected=(1001, 1)) == ProducerIdAndEpoch(E.none, 1001, 2)


@pytest.mark.parametrize("expected", [(999, 0), (1001, 0)], ids=["other-pid", "old-epoch"])
def test_reinit_with_a_stale_producer_is_fenced(expected: tuple[int, int]) -> None:
    ctx = TxnContext()
    ctx.init("t")
    ctx.init("t")
    assert ctx.init("t", expected=expected).error is E.producer_fenced


def test_a_retried_bump_whose_answer_was_lost_is_answered_again() -> None:
    """Kafka lastProducerEpoch: the client bumps (1001, 1) -> (1001, 2), loses the answer and
    sends (1001, 1) again: the same answer, no second bump, nothing fenced."""
    ctx = TxnContext()
    ctx.init("t")
    ctx.init("t")
    assert ctx.init("t", expected=(1001, 1)) == ProducerIdAndEpoch(E.none, 1001, 2)
    assert ctx.init("t", expected=(1001, 1)) == ProducerIdAndEpoch(E.none, 1001, 2)
    assert ctx.init("t", expected=(1001, 2)) == ProducerIdAndEpoch(E.none, 1001, 3)
    assert ctx.init("t", expected=(1001, 1)).error is E.producer_fenced  # two bumps back
    # A bump without an expected epoch (a new instance) keeps no previous epoch.
    assert ctx.init("t") == ProducerIdAndEpoch(E.none, 1001, 4)
    assert ctx.init("t", expected=(1001, 3)).error is E.producer_fenced
    # Kafka keeps the previous epoch in memory only: after a reload the retry is fenced.
    assert ctx.init("t", expected=(1001, 4)) == ProducerIdAndEpoch(E.none, 1001, 5)
    ctx.shard = ctx.reloaded()
    assert ctx.init("t", expected=(1001, 4)).error is E.producer_fenced


def test_a_retried_bump_onto_a_new_producer_id_is_answered_again() -> None:
    ctx = TxnContext()
    ctx.init("t")
    ctx.shard.replay(len(ctx.log), "t", TxnMetadata("t", 1001, 32766, 60_000,
                                                     S.COMPLETE_COMMIT, start_ms=T0,
                                                     last_update_ms=T0))
    first = ctx.init("t", expected=(1001, 32766))
    assert first == ProducerIdAndEpoch(E.none, 1002, 0)
    assert ctx.init("t", expected=(1001, 32766)) == first
    assert ctx.shard.txns["t"].prev_producer_id == 1001
    assert ctx.reloaded().txns["t"].prev_producer_id == 1001  # written in a v1 value
    assert ctx.init("t", expected=(1001, 5)).error is E.producer_fenced


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    ctx = TxnContext()
    ctx.init("t")
    meta = ctx.shard.txns["t"]
    ctx.shard.replay(len(ctx.log), "t", TxnMetadata("t", meta.producer_id, 32766, 60_000,
                                                     S.COMPLETE_COMMIT, start_ms=T0,
                                                     last_update_ms=T0))
    out = ctx.init("t")
    assert out.error is E.none and out.producer_id != meta.producer_id and out.producer_epoch == 0


def test_commit_goes_through_prepare_markers_and_complete() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    meta = ctx.shard.txns["t"]
    assert meta.state is S.ONGOING and meta.partitions == {("orders", 0), ("orders", 1)}
    assert meta.start_ms == T0
    assert ctx.end("t", pid, epoch, True) == ProducerIdAndEpoch(E.none, pid, epoch)
    assert [m.state for m in ctx.prepared] == [S.PREPARE_COMMIT]
    assert ctx.prepared[0].partitions == {("orders", 0), ("orders", 1)}
    # While the markers are written the id answers CONCURRENT_TRANSACTIONS.
    assert ctx.add("t", pid, epoch, ("orders", 2)) is E.concurrent_transactions
    assert ctx.end("t", pid, epoch, True).error is E.concurrent_transactions
    assert ctx.end("t", pid, epoch, False).error is E.invalid_txn_state
    assert ctx.init("t").error is E.concurrent_transactions
    ctx.complete_prepared()
    done = ctx.shard.txns["t"]
    assert done.state is S.COMPLETE_COMMIT and done.partitions == frozenset()
    # A retried EndTxn after completion is answered NONE; the opposite outcome is refused.
    assert ctx.end("t", pid, epoch, True).error is E.none
    assert ctx.end("t", pid, epoch, False).error is E.invalid_txn_state
    # The next transaction starts from CompleteCommit with a fresh start time.
    ctx.now += 5
    assert ctx.add("t", pid, epoch, ("orders", 2)) is E.none
    assert ctx.shard.txns["t"].start_ms == T0 + 5


def test_abort_completes_as_complete_abort() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    assert ctx.end("t", pid, epoch, False).error is E.none
    ctx.complete_prepared()
    assert ctx.shard.txns["t"].state is S.COMPLETE_ABORT


@pytest.mark.parametrize(("pid_delta", "epoch_delta", "error"), [
    (1, 0, E.invalid_producer_id_mapping),
    (0, -1, E.producer_fenced),
    (0, 1, E.producer_fenced),
], ids=["other-pid", "older-epoch", "newer-epoch"])
def test_requests_of_another_producer_are_refused(pid_delta: int, epoch_delta: int,
                                                  error: E) -> None:
    ctx = TxnContext()
    ctx.init("t")
    pid, epoch = started(ctx)
    assert ctx.add("t", pid + pid_delta, epoch + epoch_delta, ("x", 0)) is error
    assert ctx.end("t", pid + pid_delta, epoch + epoch_delta, True).error is error


def test_unknown_ids_and_endtxn_without_a_transaction() -> None:
    ctx = TxnContext()
    assert ctx.add("nope", 1, 0, ("x", 0)) is E.invalid_producer_id_mapping
    assert ctx.end("nope", 1, 0, True).error is E.invalid_producer_id_mapping
    out = ctx.init("t")
    assert ctx.end("t", out.producer_id, out.producer_epoch, True).error is E.invalid_txn_state


def test_adding_partitions_already_in_the_transaction_writes_nothing() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    n = len(ctx.log)
    assert ctx.add("t", pid, epoch, ("orders", 1)) is E.none
    assert len(ctx.log) == n


def test_reinit_during_a_transaction_aborts_it_and_fences_the_zombie() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    assert ctx.init("t").error is E.concurrent_transactions
    assert [(m.state, m.producer_epoch) for m in ctx.prepared] == [(S.PREPARE_ABORT, epoch + 1)]
    # The zombie (old epoch) is fenced at once, before the abort completes.
    assert ctx.end("t", pid, epoch, True).error is E.producer_fenced
    ctx.complete_prepared()
    # The new producer's retry bumps the epoch once more.
    assert ctx.init("t") == ProducerIdAndEpoch(E.none, pid, epoch + 2)
    assert ctx.add("t", pid, epoch, ("x", 0)) is E.producer_fenced


def test_a_transaction_past_its_timeout_is_aborted_with_an_epoch_bump() -> None:
    ctx = TxnContext()
    out = ctx.init("t", timeout_ms=1000)
    pid, epoch = out.producer_id, out.producer_epoch
    assert ctx.add("t", pid, epoch, ("orders", 0)) is E.none
    assert ctx.shard.next_deadline() == T0 + 1000
    ctx.sleep(999)
    assert ctx.shard.txns["t"].state is S.ONGOING
    ctx.sleep(1)
    meta = ctx.shard.txns["t"]
    assert (meta.state, meta.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
    assert ctx.shard.next_deadline() is None
    ctx.complete_prepared()
    assert ctx.shard.txns["t"].state is S.COMPLETE_ABORT
    assert ctx.end("t", pid, epoch, True).error is E.producer_fenced


def test_idle_ids_expire_as_tombstones() -> None:
    ctx = TxnContext()
    ctx.init("idle")
    pid, epoch = started(ctx, "busy")
    ctx.now += 10_000
    assert ctx.run(ctx.shard.expire_transactional_ids(ctx.now, 10_000)) == 1
    assert "idle" not in ctx.shard.txns and "busy" in ctx.shard.txns
    assert ctx.log[-1][1] is None


def test_revert_restores_the_state_and_the_deadlines() -> None:
    ctx = TxnContext()
    out = ctx.init("t", timeout_ms=1000)
    before = dict(ctx.shard.txns)
    result = ctx.shard.add_partitions("t", out.producer_id, 0, frozenset({("x", 0)}), T0)
    for record in result.records:
        ctx.shard.replay(len(ctx.log), record.key, record.value)
    assert ctx.shard.next_deadline() == T0 + 1000
    ctx.shard.revert(len(ctx.log))
    assert ctx.shard.txns == before
    assert ctx.shard.next_deadline() is None


def test_uncommitted_state_is_not_read_and_prepared_is_told_after_commit() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    result = ctx.shard.end_txn("t", pid, epoch, True, T0)
    offset = len(ctx.log)
    for record in result.records:
        ctx.shard.replay(offset, record.key, record.value)
    assert ctx.shard.txns["t"].state is S.PREPARE_COMMIT
    assert ctx.shard.committed("t").state is S.ONGOING  # type: ignore[union-attr]
    assert ctx.shard.verify("t", pid, epoch, ("orders", 0)) is E.none
    assert ctx.prepared == []
    ctx.shard.commit(offset + 1)
    assert [m.state for m in ctx.prepared] == [S.PREPARE_COMMIT]
    assert ctx.shard.verify("t", pid, epoch, ("orders", 0)) is E.concurrent_transactions


@pytest.mark.parametrize(("txn", "pid_delta", "epoch_delta", "part", "error"), [
    ("t", 0, 0, ("orders", 0), E.none),
    ("t", 0, 0, ("orders", 9), E.transaction_abortable),
    ("t", 0, 1, ("orders", 0), E.producer_fenced),
    ("t", 1, 0, ("orders", 0), E.invalid_producer_id_mapping),
    ("nope", 0, 0, ("orders", 0), E.invalid_producer_id_mapping),
], ids=["in", "not-added", "fenced", "other-pid", "unknown-id"])
def test_verify(txn: str, pid_delta: int, epoch_delta: int, part: tuple[str, int],
                error: E) -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    assert ctx.shard.verify(txn, pid + pid_delta, epoch + epoch_delta, part) is error


def test_a_reload_resumes_prepared_transactions_and_keeps_deadlines() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx, "prepared")
    ctx.end("prepared", pid, epoch, True)
    out = ctx.init("open", timeout_ms=5000)
    ctx.add("open", out.producer_id, out.producer_epoch, ("x", 0))
    shard = ctx.reloaded()
    assert shard.txns == ctx.shard.txns
    assert [(m.transactional_id, m.state) for m in ctx.reload_heard] == [
        ("prepared", S.PREPARE_COMMIT)]
    assert shard.next_deadline() == T0 + 5000


def test_last_redundant_offset_is_the_oldest_latest_record() -> None:
    ctx = TxnContext()
    ctx.init("a")          # 0
    ctx.init("b")          # 1
    ctx.init("a")          # 2
    assert ctx.shard.last_redundant_offset() == 1


def test_the_transition_table_is_kafkas() -> None:
    check_transition(S.ONGOING, S.PREPARE_COMMIT)
    check_transition(S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT)
    for old, new in [(S.EMPTY, S.PREPARE_COMMIT), (S.PREPARE_COMMIT, S.COMPLETE_ABORT),
                     (S.ONGOING, S.EMPTY), (S.PREPARE_ABORT, S.ONGOING)]:
        with pytest.raises(IllegalTransitionError):
            check_transition(old, new)


def test_a_transaction_record_past_the_size_limit_is_refused() -> None:
    ctx = TxnContext()
    ctx.shard.max_record_bytes = 200
    out = ctx.init("t")
    many = [("a-topic-name", p) for p in range(100)]
    n = len(ctx.log)
    assert ctx.add("t", out.producer_id, 0, *many) is E.unknown_server_error
    assert len(ctx.log) == n and ctx.shard.txns["t"].state is S.EMPTY
    assert ctx.add("t", out.producer_id, 0, *many[:3]) is E.none


# ---------------------------------------------------------------- transaction version 2 (KIP-890)


def end2(ctx: TxnContext, pid: int, epoch: int, commit: bool, txn: str = "t") -> ProducerIdAndEpoch:
    return ctx.run(ctx.shard.end_txn_v2(txn, pid, epoch, commit, ctx.now, ctx.next_pid))


def test_v2_end_bumps_the_epoch_every_transaction_and_writes_markers_at_it() -> None:
    ctx = TxnContext()
    pid, epoch = started(ctx)
    assert end2(ctx, pid, epoch, True) == ProducerIdAndEpoch(E.none, pid, epoch + 1)
    prepared = ctx.prepared[-1]
    assert (prepared.state, prepared.producer_epoch, prepared.client_tv) == (
        S.PREPARE_COMMIT, epoch + 1, 2)
    # The markers are pending: the next transaction's requests wait (CONCURRENT_TRANSACTIONS).
    assert ctx.add("t", pid, epoch + 1, ("orders", 0)) is E.concurrent_transactions
    assert end2(ctx, pid, epoch, True).error is E.concurrent_transactions  # a retry
    ctx.complete_prepared()
    assert ctx.shard.txns["t"].state is S.COMPLETE_COMMIT
    # A retry from the epoch before the bump is answered with the current producer and epoch.
    assert end2(ctx, pid, epoch, True) == ProducerIdAndEpoch(E.none, pid, epoch + 1)
    assert end2(ctx, pid, epoch, False).error is E.invalid_txn_state
    # The next transaction, added implicitly (Produce v12), at the new epoch.
    assert ctx.run(ctx.shard.add_partitions("t", pid, epoch + 1, frozenset({("orders", 2)}),
                                            ctx.now, 2)) is E.none
    assert ctx.add("t", pid, epoch, ("orders", 0)) is E.producer_fenced  # the old epoch
    assert end2(ctx, pid, epoch + 1, False) == ProducerIdAndEpoch(E.none, pid, epoch + 2)
    ctx.complete_prepared()
    assert ctx.reloaded().txns["t"] == ctx.shard.txns["t"]


def test_v2_abort_without_a_transaction_and_commit_without_one() -> None:
    ctx = TxnContext()
    out = ctx.init("t")
    pid, epoch = out.producer_id, out.producer_epoch
    assert end2(ctx, pid, epoch, True).error is E.invalid_txn_state
    assert end2(ctx, pid, epoch, False) == ProducerIdAndEpoch(E.none, pid, epoch + 1)
    ctx.complete_prepared()  # no partitions: completes at once
    assert ctx.shard.txns["t"].state is S.COMPLETE_ABORT
    assert end2(ctx, pid, epoch, False) == ProducerIdAndEpoch(E.none, pid, epoch + 1)  # retry
    assert end2(ctx, pid, epoch + 1, False) == ProducerIdAndEpoch(E.none, pid, epoch + 2)
    ctx.complete_prepared()
    assert end2(ctx, pid, epoch + 7, False).error is E.producer_fenced
    assert end2(ctx, pid + 50, epoch + 2, False).error is E.invalid_producer_id_mapping


def test_v2_end_at_an_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    ctx = TxnContext()
    ctx.init("t")
    ctx.shard.replay(len(ctx.log), "t", TxnMetadata("t", 1001, 32766, 60_000, S.ONGOING,
                                                     frozenset({("orders", 0)}), start_ms=T0,
                                                     last_update_ms=T0))
    out = end2(ctx, 1001, 32766, True)
    assert out == ProducerIdAndEpoch(E.none, 1002, 0)
    assert ctx.prepared[-1].producer_epoch == 32767  # the markers' epoch
    ctx.complete_prepared()
    meta = ctx.shard.txns["t"]
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (1002, 0, 1001)
    assert end2(ctx, 1001, 32766, True) == ProducerIdAndEpoch(E.none, 1002, 0)  # a retry
    assert ctx.reloaded().txns["t"] == meta


def test_v2_a_timed_out_transaction_fences_its_producer() -> None:
    """As Kafka with transaction version 2: the timeout's fence and the v2 end each bump the
    epoch, so the producer's EndTxn is fenced rather than answered as a retry."""
    ctx = TxnContext()
    out = ctx.init("t", timeout_ms=1000)
    pid, epoch = out.producer_id, out.producer_epoch
    assert ctx.run(ctx.shard.add_partitions("t", pid, epoch, frozenset({("orders", 0)}),
                                            ctx.now, 2)) is E.none
    ctx.sleep(1000)
    assert ctx.shard.txns["t"].producer_epoch == epoch + 2
    ctx.complete_prepared()
    assert end2(ctx, pid, epoch, False).error is E.producer_fenced
    assert end2(ctx, pid, epoch, True).error is E.producer_fenced
