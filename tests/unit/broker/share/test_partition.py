"""SharePartition, step by step: the KIP's worked example, then table-driven behaviour cases.

Every scenario drives the sans-IO core the way the broker shell does: ask ``next_fetch_offset``,
"read the log" from there (a list of log batch boundaries), ``acquire``, ``acknowledge`` and
then ``complete_write``, ``on_timer`` with an explicit clock. Nothing sleeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.share.partition import (
    AckOutcome,
    AcquireMode,
    SharePartition,
    SharePartitionConfig,
    ack_error_for_write_failure,
)
from broker.share.record_state import (
    LEGAL_TRANSITIONS,
    AckType,
    IllegalTransitionError,
    RecordState,
    check_transition,
)
from persister.api import PersisterStateBatch, ReadResult, SharePartitionKey, WriteParams

KEY = SharePartitionKey("g1", uuid.UUID(int=7), 0)
BO = AcquireMode.BATCH_OPTIMIZED
RL = AcquireMode.RECORD_LIMIT
AV, AQ, AK, AR = (
    RecordState.AVAILABLE,
    RecordState.ACQUIRED,
    RecordState.ACKNOWLEDGED,
    RecordState.ARCHIVED,
)
ACCEPT, RELEASE, REJECT, GAP, RENEW = (
    int(AckType.ACCEPT),
    int(AckType.RELEASE),
    int(AckType.REJECT),
    int(AckType.GAP),
    int(AckType.RENEW),
)
LOCK = 30_000


class Config:
    """A live group config: tests change it between calls, the partition reads it per call."""

    def __init__(self, **overrides: object) -> None:
        self.value = replace(SharePartitionConfig(), **overrides)  # type: ignore[arg-type]

    def __call__(self) -> SharePartitionConfig:
        return self.value

    def set(self, **overrides: object) -> None:
        self.value = replace(self.value, **overrides)  # type: ignore[arg-type]


def make(
    start: int = 100,
    batches: Sequence[PersisterStateBatch] = (),
    **overrides: object,
) -> tuple[SharePartition, Config]:
    cfg = Config(**overrides)
    loaded = SharePartition.load(
        KEY, 3, ReadResult(ErrorCode.none, state_epoch=2, start_offset=start,
                           state_batches=tuple(batches)), cfg
    )
    assert isinstance(loaded, SharePartition)
    return loaded, cfg


def fetch(
    p: SharePartition,
    member: str,
    log: Sequence[tuple[int, int]],
    now: int,
    max_records: int = 500,
    batch_size: int = 500,
    mode: AcquireMode = BO,
) -> list[tuple[int, int, int]]:
    """What the shell does: read whole log batches from the next fetch offset, then acquire."""
    offset = p.next_fetch_offset()
    read = [b for b in log if b[1] >= offset]
    got = p.acquire(member, read, max_records, batch_size, mode, now, fetch_offset=offset)
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got]


def ack(
    p: SharePartition,
    member: str,
    batches: Sequence[tuple[int, int, tuple[int, ...]]],
    now: int,
    ok: bool = True,
) -> AckOutcome:
    """Acknowledge and, when a write is needed, complete it (``ok`` = the persister's answer)."""
    out = p.acknowledge(member, batches, now)
    if out.token is not None:
        p.complete_write(out.token, ok, now)
    return out


def states(p: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    """Committed state of every cached offset at/after the SPSO."""
    return {
        o: (v.state, v.delivery_count, v.member_id)
        for o, v in p.snapshot().items()
        if o >= p.start_offset
    }


def run(lo: int, hi: int, state: RecordState, count: int, member: str | None = None
        ) -> dict[int, tuple[RecordState, int, str | None]]:
    return {o: (state, count, member) for o in range(lo, hi + 1)}


def expect(p: SharePartition, spso: int, speo: int,
           *runs: dict[int, tuple[RecordState, int, str | None]]) -> None:
    want: dict[int, tuple[RecordState, int, str | None]] = {}
    for r in runs:
        want.update(r)
    assert (p.start_offset, p.end_offset) == (spso, speo)
    assert states(p) == want


def batch(first: int, last: int, state: RecordState, count: int) -> PersisterStateBatch:
    return PersisterStateBatch(first, last, int(state), count)


def write(start: int, complete: int, *batches: PersisterStateBatch) -> WriteParams:
    return WriteParams(KEY, 2, 3, start, complete, tuple(batches))


# --------------------------------------------------------------------------- record_state


def test_transition_table_matches_the_reference() -> None:
    assert LEGAL_TRANSITIONS[AV] == {AQ, AR}
    assert LEGAL_TRANSITIONS[AQ] == {AV, AK, AR, RecordState.ARCHIVING}
    assert LEGAL_TRANSITIONS[AK] == LEGAL_TRANSITIONS[AR] == frozenset()
    # ARCHIVING (3) is persisted as Kafka 4.4 does (KIP-1191 dead letters); ACQUIRED never is.
    assert [s for s in RecordState if s.is_persisted] == [AV, AK, RecordState.ARCHIVING, AR]
    assert LEGAL_TRANSITIONS[RecordState.ARCHIVING] == {AR}
    assert check_transition(AV, AQ) is AQ
    for old, new in [(AK, AV), (AR, AQ), (AV, AK), (AQ, AQ), (AV, AV)]:
        with pytest.raises(IllegalTransitionError):
            check_transition(old, new)


# --------------------------------------------------------------------------- worked example

# The share-group KIP's state-change example (spec/seeds: records 100-121). The seed writes SPEO
# as the next offset to fetch; Kafka (and we) report it as the last cached offset, so the seed's
# "SPEO=121" is end_offset 120 here. Consumers: c1, c2, c3; lock duration 30 s.
SEED_LOG = [(100, 109), (110, 112), (113, 118), (119, 119), (120, 120)]


def test_worked_example_records_100_to_121() -> None:
    p, _ = make(start=100)
    expect(p, 100, 100)
    assert p.next_fetch_offset() == 100

    # Fetch records 100-109, acknowledge them: one write moves the SPSO to 110.
    assert fetch(p, "c1", SEED_LOG[:1], now=0) == [(100, 109, 1)]
    expect(p, 100, 109, run(100, 109, AQ, 1, "c1"))
    out = p.acknowledge("c1", [(100, 109, (ACCEPT,))], 500)
    assert out.write == write(110, 0)  # seed: StartOffset 110, no batches
    assert p.complete_write(out.token or 0, True, 500) is None
    expect(p, 110, 110)
    assert p.next_fetch_offset() == 110

    # Fetch 110-119: c1 gets 110-112, c2 113-118, c3 119 (one log batch each).
    assert fetch(p, "c1", SEED_LOG[:4], now=1_000, max_records=3) == [(110, 112, 1)]
    assert fetch(p, "c2", SEED_LOG[:4], now=11_000, max_records=6) == [(113, 118, 1)]
    assert fetch(p, "c3", SEED_LOG[:4], now=11_000, max_records=1) == [(119, 119, 1)]
    expect(p, 110, 119, run(110, 112, AQ, 1, "c1"), run(113, 118, AQ, 1, "c2"),
           run(119, 119, AQ, 1, "c3"))

    # Release 110 (c1).
    out = p.acknowledge("c1", [(110, 110, (RELEASE,))], 12_000)
    assert out.write == write(110, 0, batch(110, 110, AV, 1))
    p.complete_write(out.token or 0, True, 12_000)
    expect(p, 110, 119, run(110, 110, AV, 1), run(111, 112, AQ, 1, "c1"),
           run(113, 118, AQ, 1, "c2"), run(119, 119, AQ, 1, "c3"))

    # Acknowledge 119 (c3). We write only what changed (the seed draft also listed 111-118).
    out = p.acknowledge("c3", [(119, 119, (ACCEPT,))], 13_000)
    assert out.write == write(110, 1, batch(119, 119, AK, 1))
    p.complete_write(out.token or 0, True, 13_000)
    expect(p, 110, 119, run(110, 110, AV, 1), run(111, 112, AQ, 1, "c1"),
           run(113, 118, AQ, 1, "c2"), run(119, 119, AK, 1))

    # Fetch records 110 and 120 (c1): the released record first, then new data.
    assert p.next_fetch_offset() == 110
    assert fetch(p, "c1", SEED_LOG, now=20_000) == [(110, 110, 2), (120, 120, 1)]
    expect(p, 110, 120, run(110, 110, AQ, 2, "c1"), run(111, 112, AQ, 1, "c1"),
           run(113, 118, AQ, 1, "c2"), run(119, 119, AK, 1), run(120, 120, AQ, 1, "c1"))

    # Lock timeout of 111-112 (c1's first acquisition at t=1000 + 30 s).
    assert p.next_deadline() == 31_000
    assert p.on_timer(30_999) is None
    assert p.on_timer(31_000) == write(110, 1, batch(111, 112, AV, 1))
    expect(p, 110, 120, run(110, 110, AQ, 2, "c1"), run(111, 112, AV, 1),
           run(113, 118, AQ, 1, "c2"), run(119, 119, AK, 1), run(120, 120, AQ, 1, "c1"))
    assert p.take_wakeup() is True

    # Acknowledge 113-118 (c2).
    out = p.acknowledge("c2", [(113, 118, (ACCEPT,))], 32_000)
    assert out.write == write(110, 7, batch(113, 118, AK, 1))
    p.complete_write(out.token or 0, True, 32_000)
    expect(p, 110, 120, run(110, 110, AQ, 2, "c1"), run(111, 112, AV, 1),
           run(113, 119, AK, 1), run(120, 120, AQ, 1, "c1"))

    # Fetch 111-112 (c3): the log read starts at the batch holding 111.
    assert p.next_fetch_offset() == 111
    assert fetch(p, "c3", SEED_LOG, now=33_000) == [(111, 112, 2)]
    expect(p, 110, 120, run(110, 110, AQ, 2, "c1"), run(111, 112, AQ, 2, "c3"),
           run(113, 119, AK, 1), run(120, 120, AQ, 1, "c1"))

    # Acknowledge 110 (c1): SPSO 111. The write carries the new start offset instead of the
    # seed's explicit "110 Acknowledged" batch; the share coordinator ends up in the same state.
    out = p.acknowledge("c1", [(110, 110, (ACCEPT,))], 34_000)
    assert out.write == write(111, 7)
    p.complete_write(out.token or 0, True, 34_000)
    expect(p, 111, 120, run(111, 112, AQ, 2, "c3"), run(113, 119, AK, 1),
           run(120, 120, AQ, 1, "c1"))

    # Acknowledge 111-112 (c3): SPSO jumps to 120, cache trimmed to the last batch.
    out = p.acknowledge("c3", [(111, 112, (ACCEPT,))], 35_000)
    assert out.write == write(120, 0)  # seed: StartOffset 120, no batches
    p.complete_write(out.token or 0, True, 35_000)
    expect(p, 120, 120, run(120, 120, AQ, 1, "c1"))
    assert p.cached_batches() == [(120, 120, False)]
    assert p.next_fetch_offset() == 121
    m = p.metrics()
    assert (m.lock_timeouts, m.acks[AckType.ACCEPT], m.acks[AckType.RELEASE]) == (2, 20, 1)


# --------------------------------------------------------------------------- acknowledgement

# A standard window: a holds 100-109, b holds 110-119 (both acquired at t=0), 120-124 are
# acknowledged, 125-129 were released (AVAILABLE, delivery count 1).
def window(**overrides: Any) -> tuple[SharePartition, Config]:
    p, cfg = make(start=100, **overrides)
    fetch(p, "a", [(100, 109)], 0)
    fetch(p, "b", [(110, 119)], 0)
    fetch(p, "a", [(120, 124)], 0)
    ack(p, "a", [(120, 124, (ACCEPT,))], 0)
    fetch(p, "a", [(125, 129)], 0)
    ack(p, "a", [(125, 129, (RELEASE,))], 0)
    p.take_wakeup()
    return p, cfg


BAD_ACKS = [
    pytest.param("a", [(105, 104, (ACCEPT,))], 1, ErrorCode.invalid_request, id="first-gt-last"),
    pytest.param("a", [(105, 107, (ACCEPT,)), (103, 104, (ACCEPT,))], 1,
                 ErrorCode.invalid_request, id="batches-not-ascending"),
    pytest.param("a", [(100, 101, ())], 1, ErrorCode.invalid_request, id="empty-types"),
    pytest.param("a", [(100, 102, (ACCEPT, RELEASE))], 1, ErrorCode.invalid_request,
                 id="types-count-mismatch"),
    pytest.param("a", [(100, 101, (5,))], 1, ErrorCode.invalid_request, id="unknown-type"),
    pytest.param("a", [(100, 101, (ACCEPT, -1))], 1, ErrorCode.invalid_request,
                 id="unknown-type-per-offset"),
    pytest.param("a", [(105, 130, (ACCEPT,))], 1, ErrorCode.invalid_request,
                 id="last-past-cached-data"),
    pytest.param("a", [(131, 135, (ACCEPT,))], 1, ErrorCode.invalid_request,
                 id="first-past-cached-data"),
    pytest.param("a", [(110, 111, (ACCEPT,))], 1, ErrorCode.invalid_record_state,
                 id="another-members-records"),
    pytest.param("a", [(108, 111, (ACCEPT,))], 1, ErrorCode.invalid_record_state,
                 id="range-spanning-two-members"),
    pytest.param("a", [(120, 121, (ACCEPT,))], 1, ErrorCode.invalid_record_state,
                 id="already-acknowledged"),
    pytest.param("a", [(125, 125, (REJECT,))], 1, ErrorCode.invalid_record_state,
                 id="available-not-acquired"),
    pytest.param("a", [(100, 100, (ACCEPT,))], LOCK, ErrorCode.invalid_record_state,
                 id="lock-expired-before-timer-ran"),
    pytest.param("a", [(100, 101, (ACCEPT,)), (101, 102, (ACCEPT,))], 1,
                 ErrorCode.invalid_record_state, id="same-offset-twice"),
    pytest.param("a", [(110, 110, (RENEW,))], 1, ErrorCode.invalid_record_state,
                 id="renew-another-members-record"),
    pytest.param("a", [(125, 125, (RENEW,))], 1, ErrorCode.invalid_record_state,
                 id="renew-not-acquired"),
    pytest.param("a", [(120, 120, (RENEW,))], 1, ErrorCode.invalid_record_state,
                 id="renew-acknowledged"),
    pytest.param("a", [(100, 100, (RENEW,))], LOCK + 1, ErrorCode.invalid_record_state,
                 id="renew-after-lock-expiry"),
    pytest.param("a", [(100, 101, (ACCEPT,)), (110, 110, (ACCEPT,))], 1,
                 ErrorCode.invalid_record_state, id="second-batch-fails-first-rolled-back"),
    pytest.param("a", [(100, 104, (ACCEPT, ACCEPT, RENEW, ACCEPT, REJECT)), (125, 125, (GAP,))],
                 1, ErrorCode.invalid_record_state, id="per-offset-then-bad-batch"),
]


@pytest.mark.parametrize(("member", "batches", "now", "error"), BAD_ACKS)
def test_bad_acknowledgement_changes_nothing(
    member: str, batches: list[tuple[int, int, tuple[int, ...]]], now: int, error: ErrorCode
) -> None:
    p, _ = window()
    before = (p.snapshot(), p.cached_batches(), p.start_offset, p.metrics())
    out = p.acknowledge(member, batches, now)
    assert out.error == error
    assert out.error_message
    assert (out.write, out.token) == (None, None)
    assert (p.snapshot(), p.cached_batches(), p.start_offset, p.metrics()) == before
    assert p.pending_tokens == frozenset()


def test_renew_when_disabled_by_group_config_is_invalid_record_state() -> None:
    p, cfg = window()
    cfg.set(renew_enabled=False)
    out = p.acknowledge("a", [(100, 109, (RENEW,))], 1)
    assert out.error == ErrorCode.invalid_record_state
    cfg.set(renew_enabled=True)  # read per call: enabling it again works at once
    assert p.acknowledge("a", [(100, 109, (RENEW,))], 1).error == ErrorCode.none


def test_ack_on_empty_cache_and_in_gap_window_is_invalid_record_state() -> None:
    p, _ = make(start=100)
    assert p.acknowledge("a", [(100, 101, (ACCEPT,))], 0).error == ErrorCode.invalid_record_state
    p, _ = make(start=100, batches=[batch(105, 109, AV, 1), batch(115, 119, AV, 1)])
    # 100-104 was never delivered: no floor batch.
    assert p.acknowledge("a", [(100, 101, (ACCEPT,))], 0).error == ErrorCode.invalid_record_state
    # 110 falls in the hole after 105-109.
    assert p.acknowledge("a", [(110, 111, (ACCEPT,))], 0).error == ErrorCode.invalid_request
    # A range crossing the hole.
    assert p.acknowledge("a", [(108, 116, (ACCEPT,))], 0).error == ErrorCode.invalid_record_state


def test_ack_below_spso_is_accepted_and_skipped() -> None:
    p, _ = window()
    out = p.acknowledge("a", [(90, 99, (ACCEPT,))], 1)
    assert out == AckOutcome(ErrorCode.none)
    out = p.acknowledge("a", [(95, 101, (ACCEPT,))], 1)
    assert out.error == ErrorCode.none and out.token is not None
    assert out.write == write(102, 5)  # 100-101 done, 120-124 counted as complete
    p.complete_write(out.token, True, 1)
    assert p.start_offset == 102


def test_per_offset_types_map_to_states() -> None:
    p, _ = window()
    out = p.acknowledge("a", [(100, 104, (ACCEPT, RELEASE, REJECT, GAP, RENEW))], 1_000)
    assert out.error == ErrorCode.none
    views = p.snapshot()
    # Tentative until the write completes: committed state is still ACQUIRED.
    assert [(views[o].state, views[o].pending) for o in range(100, 105)] == [
        (AQ, AK), (AQ, AV), (AQ, AR), (AQ, AR), (AQ, None)]
    assert out.write == write(101, 7, batch(101, 101, AV, 1), batch(102, 103, AR, 1))
    p.complete_write(out.token or 0, True, 1_000)
    assert [states(p)[o][0] for o in range(101, 105)] == [AV, AR, AR, AQ]
    assert p.offset_view(104).deadline_ms == 1_000 + LOCK  # type: ignore[union-attr]
    assert p.next_fetch_offset() == 101


def test_ack_write_failure_rolls_back_to_acquired() -> None:
    p, _ = window()
    before = p.snapshot()
    out = p.acknowledge("a", [(100, 109, (ACCEPT,))], 1_000)
    assert p.complete_write(out.token or 0, False, 1_000) is None
    assert p.snapshot() == before
    # The member can acknowledge again, and this time it sticks.
    assert ack(p, "a", [(100, 109, (ACCEPT,))], 2_000).error == ErrorCode.none
    assert p.start_offset == 110


def test_write_failure_after_lock_expiry_releases_or_archives() -> None:
    p, cfg = window()
    out = p.acknowledge("a", [(100, 109, (ACCEPT,))], 1_000)
    # The timer fires while the write is in flight: records with a pending ack are skipped.
    assert p.on_timer(LOCK) is not None  # b's 110-119 expire
    assert states(p)[100] == (AQ, 1, "a")
    cfg.set(delivery_count_limit=1)  # lowered meanwhile: rollback archives at the limit
    follow_up = p.complete_write(out.token or 0, False, LOCK + 5)
    assert follow_up == write(110, 5)  # 100-109 archived, now behind the new start offset
    assert p.start_offset == 110
    assert p.metrics().lock_timeouts == 20
    assert p.metrics().delivery_limit_archives == 10


def test_concurrent_ack_on_pending_records_is_invalid_record_state() -> None:
    p, _ = window()
    first = p.acknowledge("a", [(100, 104, (ACCEPT,))], 1)
    assert first.token is not None
    again = p.acknowledge("a", [(104, 106, (ACCEPT,))], 1)
    assert again.error == ErrorCode.invalid_record_state
    # Neither the timer nor a session close touches records with an ack in flight.
    assert p.release_member("a", 2) == write(100, 5, batch(105, 109, AV, 1))
    assert [states(p)[o] for o in (104, 105)] == [(AQ, 1, "a"), (AV, 1, None)]
    p.complete_write(first.token, True, 3)
    assert p.start_offset == 105


def test_out_of_order_commits_emit_a_follow_up_start_offset_write() -> None:
    p, _ = window()
    a = p.acknowledge("a", [(100, 109, (ACCEPT,))], 1)
    b = p.acknowledge("b", [(110, 119, (ACCEPT,))], 1)
    assert a.write is not None and b.write is not None
    assert (a.write.start_offset, b.write.start_offset) == (110, 100)
    assert p.complete_write(b.token or 0, True, 2) is None  # SPSO stays 100: a still pending
    assert p.start_offset == 100
    # a commits last: SPSO jumps to 125, further than any write said, so one more write.
    assert p.complete_write(a.token or 0, True, 3) == write(125, 0)
    with pytest.raises(KeyError):
        p.complete_write(a.token or 0, True, 3)


@pytest.mark.parametrize(
    ("code", "mapped"),
    [
        (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available),
        (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available),
        (ErrorCode.fenced_state_epoch, ErrorCode.not_leader_or_follower),
        (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower),
        (ErrorCode.group_id_not_found, ErrorCode.group_id_not_found),
        # The state log could not be synced (issue 12 section 6): said so, not "unknown".
        (ErrorCode.kafka_storage_error, ErrorCode.kafka_storage_error),
        (ErrorCode.invalid_request, ErrorCode.unknown_server_error),
    ],
    ids=lambda c: c.name,
)
def test_write_error_mapping(code: ErrorCode, mapped: ErrorCode) -> None:
    assert ack_error_for_write_failure(code) == mapped


# --------------------------------------------------------------------------- RENEW


def test_renew_restarts_the_lock_without_a_write() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    out = p.acknowledge("a", [(0, 9, (RENEW,))], 20_000)
    assert out == AckOutcome(ErrorCode.none)  # nothing to persist, reply at once
    assert p.on_timer(LOCK) is None
    assert p.next_deadline() == 20_000 + LOCK
    assert states(p)[0] == (AQ, 1, "a")
    assert p.on_timer(20_000 + LOCK) == write(0, 0, batch(0, 9, AV, 1))
    assert p.metrics().acks[AckType.RENEW] == 10


def test_renew_part_of_a_batch_mixed_with_accept() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    types = (RENEW, RENEW, ACCEPT, ACCEPT, RENEW, RENEW, RENEW, RENEW, RENEW, RENEW)
    out = p.acknowledge("a", [(0, 9, types)], 10_000)
    assert out.write == write(0, 2, batch(2, 3, AK, 1))
    p.complete_write(out.token or 0, True, 10_000)
    assert [p.offset_view(o).deadline_ms for o in (0, 4, 9)] == [40_000] * 3  # type: ignore
    assert p.on_timer(LOCK) is None
    assert p.on_timer(40_000) == write(0, 2, batch(0, 1, AV, 1), batch(4, 9, AV, 1))


def test_renew_with_log_start_movement_skips_offsets_below_spso() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    p.on_log_start_offset_moved(5)
    assert p.acknowledge("a", [(0, 9, (RENEW,))], 10_000).error == ErrorCode.none
    assert p.offset_view(2).deadline_ms == LOCK  # type: ignore[union-attr]
    assert p.offset_view(7).deadline_ms == 40_000  # type: ignore[union-attr]
    # 0-4 archive on expiry; the write just records the start offset moved by the log.
    assert p.on_timer(LOCK) == write(5, 0)
    assert p.cached_batches() == [(0, 9, True)] and p.offset_view(2).state is AR  # type: ignore


# --------------------------------------------------------------------------- acquisition


@pytest.mark.parametrize(
    ("log", "max_records", "batch_size", "mode", "acquired"),
    [
        pytest.param([(0, 3), (4, 7), (8, 11), (12, 15)], 100, 5, BO, [(0, 7), (8, 15)],
                     id="batchsize-5-over-4-record-batches"),
        pytest.param([(0, 3), (4, 7), (8, 11), (12, 15)], 100, 4, BO,
                     [(0, 3), (4, 7), (8, 11), (12, 15)], id="batchsize-equals-log-batch"),
        pytest.param([(0, 3), (4, 7), (8, 11), (12, 15)], 100, 0, BO, [(0, 15)],
                     id="batchsize-0-no-split"),
        pytest.param([(0, 3), (4, 7), (8, 11), (12, 15)], 1, 1, BO, [(0, 3)],
                     id="maxrecords-1-batchsize-1"),
        pytest.param([(0, 3), (4, 7), (8, 11), (12, 15)], 5, 500, BO, [(0, 7)],
                     id="budget-rounded-up-to-log-batch-end"),
        pytest.param([(0, 9)], 3, 500, BO, [(0, 9)], id="maxrecords-is-soft-limit"),
        pytest.param([(0, 9)], 3, 500, RL, [(0, 2)], id="record-limit-cuts-log-batch"),
        pytest.param([(0, 4), (5, 9)], 7, 500, RL, [(0, 6)], id="record-limit-two-batches"),
        pytest.param([(0, 4), (5, 9)], 7, 5, RL, [(0, 4), (5, 6)],
                     id="record-limit-with-batchsize"),
        pytest.param([(0, 2), (6, 9)], 100, 500, BO, [(0, 9)],
                     id="compacted-hole-rides-with-previous-batch"),
    ],
)
def test_new_records_are_split_at_log_batch_boundaries(
    log: list[tuple[int, int]], max_records: int, batch_size: int, mode: AcquireMode,
    acquired: list[tuple[int, int]],
) -> None:
    p, _ = make(start=0)
    got = fetch(p, "a", log, 0, max_records=max_records, batch_size=batch_size, mode=mode)
    assert got == [(lo, hi, 1) for lo, hi in acquired]
    assert [(lo, hi) for lo, hi, _ in p.cached_batches()][: len(acquired) - 1] == acquired[:-1]


def test_record_limit_leaves_rest_of_log_batch_available() -> None:
    p, _ = make(start=0)
    assert fetch(p, "a", [(0, 9)], 0, max_records=3, mode=RL) == [(0, 2, 1)]
    assert p.cached_batches() == [(0, 9, True)]
    expect(p, 0, 9, run(0, 2, AQ, 1, "a"), run(3, 9, AV, 0))
    assert p.next_fetch_offset() == 3
    assert fetch(p, "b", [(0, 9)], 0, max_records=3, mode=RL) == [(3, 5, 1)]
    # A batch_optimized member takes the rest of the batch.
    assert fetch(p, "c", [(0, 9), (10, 19)], 0, max_records=2, mode=BO) == [(6, 9, 1)]
    assert p.next_fetch_offset() == 10


def test_reacquire_whole_available_batch_and_merge_per_offset_ranges() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 4), (5, 9)], 0, batch_size=5)
    ack(p, "a", [(0, 4, (RELEASE,))], 1)  # whole batch: stays one entry
    ack(p, "a", [(5, 9, (RELEASE, RELEASE, ACCEPT, RELEASE, RELEASE))], 1)
    assert p.cached_batches() == [(0, 4, False), (5, 9, True)]
    assert fetch(p, "b", [(0, 4), (5, 9), (10, 11)], 2) == [
        (0, 4, 2), (5, 6, 2), (8, 9, 2), (10, 11, 1)]
    assert p.cached_batches() == [(0, 4, False), (5, 9, True), (10, 11, False)]


def test_gap_windows_from_persisted_state_are_fetched_first() -> None:
    p, _ = make(start=100, batches=[batch(105, 109, AK, 1), batch(112, 114, AV, 2)])
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (100, 114, 100)
    log = [(100, 104), (105, 109), (110, 114), (115, 119)]
    assert fetch(p, "a", log, 0) == [(100, 104, 1), (110, 111, 1), (112, 114, 3), (115, 119, 1)]
    expect(p, 100, 119, run(100, 104, AQ, 1, "a"), run(105, 109, AK, 1),
           run(110, 111, AQ, 1, "a"), run(112, 114, AQ, 3, "a"), run(115, 119, AQ, 1, "a"))
    ack(p, "a", [(100, 104, (ACCEPT,)), (110, 119, (ACCEPT,))], 1)
    assert (p.start_offset, p.cached_batches()) == (120, [])


def test_persisted_terminal_prefix_moves_spso_on_load() -> None:
    p, _ = make(start=100, batches=[batch(100, 104, AK, 1), batch(105, 106, AV, 2)])
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (105, 106, 105)


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(ReadResult(ErrorCode.none, 1, 100, (batch(99, 101, AV, 1),)),
                     id="batch-below-start"),
        pytest.param(ReadResult(ErrorCode.none, 1, 100, (PersisterStateBatch(105, 104, 0, 1),)),
                     id="last-before-first"),
        pytest.param(ReadResult(ErrorCode.none, 1, 100, (PersisterStateBatch(100, 104, 1, 1),)),
                     id="acquired-is-never-persisted"),
        pytest.param(ReadResult(ErrorCode.none, 1, 100,
                                (batch(100, 104, AV, 1), batch(104, 106, AK, 1))),
                     id="overlapping"),
        pytest.param(ReadResult(ErrorCode.fenced_leader_epoch), id="read-error"),
    ],
)
def test_load_rejects_bad_state(read: ReadResult) -> None:
    got = SharePartition.load(KEY, 1, read, Config())
    assert got == (read.error if read.error != ErrorCode.none else ErrorCode.unknown_server_error)


def test_load_requires_resolved_start_offset() -> None:
    with pytest.raises(ValueError):
        SharePartition.load(KEY, 1, ReadResult(ErrorCode.none, 1, -1), Config())


def test_compacted_away_available_records_are_archived() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 1)
    # The log no longer has 0-4 (compaction): the read from 0 starts at 5.
    assert fetch(p, "a", [(5, 9)], 2) == [(5, 9, 2)]
    assert p.start_offset == 5
    # And offsets past the cache that the log skipped are filled as ARCHIVED.
    ack(p, "a", [(5, 9, (ACCEPT,))], 3)
    assert fetch(p, "a", [(20, 24)], 4) == [(20, 24, 1)]
    assert (p.start_offset, p.end_offset) == (20, 24)


# --------------------------------------------------------------------------- throttling


def test_throttled_redelivery_100_100_100_50_then_singles() -> None:
    """SCT testFetchWithThrottledDelivery: 100 records, limit 5, every delivery released."""
    p, _ = make(start=0, delivery_count_limit=5)
    sizes: list[int] = []
    for now in range(200):
        got = fetch(p, "a", [(0, 99)], now, max_records=100, batch_size=100)
        if not got:
            break
        sizes.append(sum(hi - lo + 1 for lo, hi, _ in got))
        assert max(c for _, _, c in got) <= 5
        ack(p, "a", [(lo, hi, (RELEASE,)) for lo, hi, _ in got], now)
    assert sizes == [100, 100, 100, 50] + [1] * 50 + [50] + [1] * 50
    assert p.start_offset == 100 and p.cached_batches() == []
    assert p.metrics().delivery_limit_archives == 100


def test_throttling_only_counts_records_actually_acquired() -> None:
    p, _ = make(start=0, delivery_count_limit=5)
    fetch(p, "x", [(0, 9)], 0)
    for now in (1, 2, 3):  # offset 0 alone reaches delivery count 4, still held by x
        ack(p, "x", [(0, 0, (RELEASE,))], now)
        fetch(p, "x", [(0, 9)], now)
    assert states(p)[0] == (AQ, 4, "x")
    ack(p, "x", [(1, 9, (RELEASE,))], 5)
    assert fetch(p, "y", [(0, 9)], 6, max_records=100) == [(1, 9, 2)]  # not throttled


# --------------------------------------------------------------------------- lock limit


def test_default_lock_limit_counts_every_offset_in_the_window() -> None:
    p, _ = make(start=0, max_record_locks=10)
    assert fetch(p, "a", [(0, 9)], 0) == [(0, 9, 1)]
    assert p.can_acquire() is False
    assert fetch(p, "a", [(0, 9), (10, 19)], 0) == []
    ack(p, "a", [(1, 9, (ACCEPT,))], 1)  # 0 is stuck: the window is still 10 wide
    assert p.can_acquire() is False
    assert fetch(p, "b", [(0, 9), (10, 19)], 1) == []
    ack(p, "a", [(0, 0, (RELEASE,))], 2)  # a re-delivery inside the window is allowed
    assert p.can_acquire() is True
    assert fetch(p, "b", [(0, 9), (10, 19)], 2) == [(0, 0, 2)]


def test_lock_limit_partial_room_soft_in_batch_optimized_exact_in_record_limit() -> None:
    p, _ = make(start=0, max_record_locks=15)
    fetch(p, "a", [(0, 9)], 0)
    assert fetch(p, "a", [(10, 19)], 0) == [(10, 19, 1)]  # 5 of room, rounded to the batch
    p, _ = make(start=0, max_record_locks=15)
    fetch(p, "a", [(0, 9)], 0)
    assert fetch(p, "a", [(10, 19)], 0, mode=RL) == [(10, 14, 1)]


def test_opt_in_lock_limit_counts_only_non_terminal_records() -> None:
    p, cfg = make(start=0, max_record_locks=10, count_only_inflight_toward_lock_limit=True)
    fetch(p, "a", [(0, 9)], 0)
    ack(p, "a", [(1, 9, (ACCEPT,))], 1)
    assert p.can_acquire() is True
    assert fetch(p, "b", [(10, 14), (15, 19)], 1, max_records=100) == [(10, 19, 1)]
    assert p.can_acquire() is False  # 0 + 10..19 = 11 non-terminal records
    cfg.set(count_only_inflight_toward_lock_limit=False, max_record_locks=100)  # live change
    assert p.can_acquire() is True


# --------------------------------------------------------------------------- locks and release


def test_lock_timeout_archives_at_delivery_limit_and_moves_spso() -> None:
    p, _ = make(start=0, delivery_count_limit=2)
    fetch(p, "a", [(0, 9)], 0)
    assert p.on_timer(LOCK) == write(0, 0, batch(0, 9, AV, 1))
    fetch(p, "b", [(0, 9)], LOCK)
    assert p.on_timer(2 * LOCK) == write(10, 0)
    assert (p.start_offset, p.end_offset, p.cached_batches()) == (10, 10, [])
    m = p.metrics()
    assert (m.lock_timeouts, m.delivery_limit_archives) == (20, 10)


def test_release_member_keeps_counts_and_skips_other_members() -> None:
    p, _ = make(start=0, delivery_count_limit=3)
    fetch(p, "a", [(0, 4)], 0)
    ack(p, "a", [(0, 4, (RELEASE,))], 1)
    fetch(p, "a", [(0, 4), (5, 9)], 2, max_records=5)  # 0-4 again (count 2)
    fetch(p, "b", [(5, 9)], 2)
    assert p.release_member("a", 3) == write(0, 0, batch(0, 4, AV, 2))
    expect(p, 0, 9, run(0, 4, AV, 2), run(5, 9, AQ, 1, "b"))
    assert p.release_member("a", 4) is None
    # The next delivery is the last one (count 2 == limit - 1): throttled to one record.
    assert fetch(p, "a", [(0, 4), (5, 9)], 5) == [(0, 0, 3)]
    assert p.release_member("a", 6) == write(1, 0)  # archived at the limit, SPSO moves
    expect(p, 1, 9, run(1, 4, AV, 2), run(5, 9, AQ, 1, "b"))
    assert p.metrics().lock_timeouts == 0


def test_dynamic_delivery_limit_applies_on_next_release() -> None:
    p, cfg = make(start=0, delivery_count_limit=5)
    fetch(p, "a", [(0, 9)], 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 1)
    fetch(p, "a", [(0, 9)], 2)
    cfg.set(delivery_count_limit=2)
    assert ack(p, "a", [(0, 9, (RELEASE,))], 3).write == write(10, 0)  # all archived
    assert p.start_offset == 10


def test_wakeup_and_oldest_unacked() -> None:
    p, _ = make(start=0)
    assert p.take_wakeup() is False
    fetch(p, "a", [(0, 4)], 100)
    fetch(p, "b", [(5, 9)], 200)
    assert p.take_wakeup() is False
    assert p.oldest_unacked_acquired_at_ms() == 100
    ack(p, "a", [(0, 4, (ACCEPT,))], 300)
    assert p.take_wakeup() is True and p.take_wakeup() is False
    assert p.oldest_unacked_acquired_at_ms() == 200
    m = p.metrics()
    assert (m.in_flight_records, m.in_flight_batches, m.acquired_records) == (5, 1, 5)
    assert m.delivery_complete_count == 0


# --------------------------------------------------------------------------- log start offset


def test_log_start_offset_inside_the_window() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    ack(p, "a", [(0, 4, (RELEASE,))], 1)
    p.on_log_start_offset_moved(7)
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (7, 9, 10)
    views = p.snapshot()
    assert [views[o].state for o in range(10)] == [AR] * 5 + [AQ] * 5
    # Acks for records below the new start are ignored; the rest apply.
    out = ack(p, "a", [(0, 9, (ACCEPT,))], 2)
    assert out.write == write(10, 0)
    # 5-6 stay ACQUIRED below the SPSO until their lock expires, then are archived and trimmed.
    assert p.cached_batches() == [(0, 9, True)]
    assert p.on_timer(LOCK) is None
    assert p.cached_batches() == []


def test_log_start_offset_past_the_window_and_first_write_carries_it() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    ack(p, "a", [(0, 9, (RELEASE,))], 1)
    p.on_log_start_offset_moved(50)
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (50, 50, 50)
    assert p.cached_batches() == []
    p.on_log_start_offset_moved(40)  # never backwards
    assert p.start_offset == 50
    assert fetch(p, "a", [(50, 59)], 2) == [(50, 59, 1)]
    assert p.on_timer(2 + LOCK) == write(50, 0, batch(50, 59, AV, 1))


def test_failed_timer_write_is_carried_by_the_next_write() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 4)], 0)
    fetch(p, "b", [(5, 9)], 10)
    lost = p.on_timer(LOCK)
    assert lost == write(0, 0, batch(0, 4, AV, 1))
    p.on_write_failed(lost)
    # b's ack carries 0-4 again; if that write fails too, they stay owed.
    out = p.acknowledge("b", [(5, 9, (ACCEPT,))], LOCK + 1)
    assert out.write == write(0, 5, batch(0, 4, AV, 1), batch(5, 9, AK, 1))
    p.complete_write(out.token or 0, False, LOCK + 1)
    out = p.acknowledge("b", [(5, 9, (REJECT,))], LOCK + 2)
    assert out.write == write(0, 5, batch(0, 4, AV, 1), batch(5, 9, AR, 1))
    p.complete_write(out.token or 0, True, LOCK + 2)
    assert p.release_member("a", LOCK + 3) is None  # nothing owed any more
    assert p.start_offset == 0 and p.next_fetch_offset() == 0


def test_many_renewals_keep_one_live_deadline_per_record() -> None:
    p, _ = make(start=0)
    fetch(p, "a", [(0, 9)], 0)
    for i in range(3_000):  # every renewal leaves a stale heap entry behind
        assert p.acknowledge("a", [(i % 10, i % 10, (RENEW,))], i).error == ErrorCode.none
    assert len(p._locks) < 1_500  # compacted (white-box: the heap stays proportional)
    assert p.next_deadline() == 2_990 + LOCK  # offset 0, renewed last at t=2990
    assert p.on_timer(2_995 + LOCK) == write(0, 0, batch(0, 5, AV, 1))
    assert p.next_deadline() == 2_996 + LOCK
