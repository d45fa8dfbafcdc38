"""Validating a share-partition acknowledgement before anything changes.

One ShareFetch/ShareAcknowledge carries, per partition, a list of acknowledgement batches
``(first_offset, last_offset, ack_types)`` with one type for the whole range or one per offset.
Kafka treats a partition's batches as one unit: if any offset fails, none of the partition's
transitions survive (reference section 3, "Acknowledgement"). We get that for free by planning
first, read-only, and applying only a plan that fully validated.

Which error (reference sections 3 and 4):
- INVALID_REQUEST: first > last; batches out of order (first below the previous last); no types;
  several types whose count is not the range size; an unknown type; a last offset past the last
  cached offset; a first offset past the cached batch it falls after.
- INVALID_RECORD_STATE: offsets not in the cache; a record that is not ACQUIRED, is owned by
  another member, has an acknowledgement still waiting for its state write, or whose lock has
  already expired; an offset acknowledged twice in one request; RENEW while
  ``share.renew.acknowledge.enable`` is false.
- Batches wholly below the SPSO are accepted and ignored; offsets below it are skipped.

A plan is a list of ``(first, last, types)`` segments, ascending and disjoint, where ``types``
holds one AckType for the whole range or one per offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.share.inflight import InFlightCache, RecordInfo
from broker.share.record_state import AckType, RecordState
from persister.api import WriteParams

__all__ = [
    "AckBatch",
    "AckOutcome",
    "AckSegment",
    "ack_error_for_write_failure",
    "check_ack_shape",
    "plan_acknowledgement",
]

AckBatch = tuple[int, int, Sequence[int]]
AckSegment = tuple[int, int, tuple[AckType, ...]]

_VALID_ACK_TYPES = frozenset(int(t) for t in AckType)


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """Result of :meth:`SharePartition.acknowledge`.

    ``error`` is the partition-level AcknowledgeErrorCode. On success with ``token`` set, the
    shell must persist ``write`` and then call ``complete_write(token, ...)`` before replying;
    with ``token`` None (RENEW-only, or nothing at/after the SPSO) it can reply at once.
    """

    error: ErrorCode
    error_message: str | None = None
    write: WriteParams | None = None
    token: int | None = None


def ack_error_for_write_failure(code: ErrorCode) -> ErrorCode:
    """Map a failed WriteShareGroupState error to the ack error the client sees (reference 3)."""
    if code in (
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch):
        return ErrorCode.not_leader_or_follower
    if code in (ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition,
                ErrorCode.kafka_storage_error):
        # KAFKA_STORAGE_ERROR: the share-state log could not be synced (section 6 of issue 12);
        # the records stay acquired until their lock expires.
        return code
    return ErrorCode.unknown_server_error


def check_ack_shape(batches: Sequence[AckBatch]) -> str | None:
    """The request-level batch checks (INVALID_REQUEST); returns a message or None."""
    prev_last: int | None = None
    for first, last, types in batches:
        if first > last:
            return f"first offset {first} > last offset {last}"
        if prev_last is not None and first < prev_last:
            return "acknowledgement batches are not in ascending order"
        if not types:
            return "empty acknowledge types"
        if len(types) != 1 and len(types) != last - first + 1:
            return "acknowledge types do not match the batch size"
        if any(t not in _VALID_ACK_TYPES for t in types):
            return "unknown acknowledge type"
        prev_last = last
    return None


def plan_acknowledgement(
    cache: InFlightCache,
    start_offset: int,
    member_id: str,
    batches: Sequence[AckBatch],
    now_ms: int,
    renew_enabled: bool,
) -> list[AckSegment] | AckOutcome:
    """Validate every batch against the cache; the plan, or the error outcome."""
    shape_error = check_ack_shape(batches)
    if shape_error is not None:
        return AckOutcome(ErrorCode.invalid_request, shape_error)
    plan: list[AckSegment] = []
    for first, last, types in batches:
        if last < start_offset:
            continue  # whole batch already behind the SPSO: silently accepted
        lo = max(first, start_offset)
        floor = cache.floor(lo)
        last_cached = cache.last_offset
        if floor is None or last_cached is None:
            return AckOutcome(ErrorCode.invalid_record_state, "offsets not found in the cache")
        if last > last_cached:
            return AckOutcome(ErrorCode.invalid_request, "last offset is past acquired records")
        if floor.last_offset < lo:
            return AckOutcome(ErrorCode.invalid_request, "first offset is past acquired records")
        if plan and lo <= plan[-1][1]:
            # The same offset twice: Kafka finds it mid-transition from the earlier batch.
            return AckOutcome(ErrorCode.invalid_record_state, "offset acknowledged twice")
        seg_types = tuple(AckType(t) for t in (types if len(types) == 1 else types[lo - first :]))
        seg = (lo, last, seg_types)
        error = _validate_segment(cache, seg, member_id, now_ms, renew_enabled)
        if error is not None:
            return error
        plan.append(seg)
    return plan


def _validate_segment(
    cache: InFlightCache, seg: AckSegment, member_id: str, now_ms: int, renew_enabled: bool
) -> AckOutcome | None:
    lo, hi, types = seg
    if not renew_enabled and AckType.RENEW in types:
        return AckOutcome(ErrorCode.invalid_record_state, "share.renew.acknowledge.enable is false")
    expected = lo
    for run_lo, run_hi, info in cache.runs(lo, hi):
        if run_lo != expected:
            return AckOutcome(ErrorCode.invalid_record_state, "offsets not in the cache")
        problem = _record_problem(info, member_id, now_ms)
        if problem is not None:
            return AckOutcome(ErrorCode.invalid_record_state, problem)
        expected = run_hi + 1
    if expected != hi + 1:
        return AckOutcome(ErrorCode.invalid_record_state, "offsets not in the cache")
    return None


def _record_problem(info: RecordInfo, member_id: str, now_ms: int) -> str | None:
    if info.state is not RecordState.ACQUIRED:
        return f"record is {info.state.name}, not ACQUIRED"
    if info.pending is not None:
        return "record has an acknowledgement waiting for its state write"
    if info.member_id != member_id:
        return "record is acquired by another member"
    if info.deadline_ms is not None and info.deadline_ms <= now_ms:
        # The lock is over even if the timer has not run yet: the record is no longer ours.
        return "acquisition lock expired"
    return None
