"""A log batch spanning huge offset ranges never costs one in-flight object per offset.

Produce validation refuses batches whose record count their bytes cannot hold, but a share
partition must not depend on it (logs written before, compacted spans): cutting such a batch is
bounded by MAX_EXPLODED_OFFSETS (broker/share/inflight.py).
"""

from __future__ import annotations

from broker.share.inflight import MAX_EXPLODED_OFFSETS
from broker.share.partition import SharePartition
from tests.unit.broker.share.test_partition import (
    ACCEPT, AK, AQ, AV, REJECT, RELEASE, RL, ack, fetch, make,
)


def infos(p: SharePartition) -> int:
    """RecordInfo objects the partition's cache holds."""
    return sum(len(list(b.all_infos())) for b in p._cache)  # noqa: SLF001


def state_at(p: SharePartition, offset: int) -> object:
    batch = p._cache.containing(offset)  # noqa: SLF001
    assert batch is not None
    return batch.info(offset).state


def test_cutting_a_huge_log_batch_is_bounded() -> None:
    # First a batch four times the limit (cheap even without the bound, so a regression fails
    # here), then one of 2^31-1 offsets (which, unbounded, would exhaust memory).
    for span in (4 * MAX_EXPLODED_OFFSETS, 2**31 - 1):
        _cut_and_ack(span)


def _cut_and_ack(span: int) -> None:
    p, _ = make(start=0)
    log = [(0, span - 1)]
    # record_limit cuts inside the log batch: the rest must stay AVAILABLE, not be exploded.
    assert fetch(p, "m1", log, now=1, max_records=10, mode=RL) == [(0, 9, 1)]
    assert infos(p) <= MAX_EXPLODED_OFFSETS
    assert state_at(p, 5) is AQ and state_at(p, span - 1) is AV
    # Per-offset ack types, a partial accept and a release of a middle range stay bounded.
    ack(p, "m1", [(0, 2, (ACCEPT, REJECT, RELEASE)), (3, 5, (ACCEPT,))], now=2)
    assert infos(p) <= MAX_EXPLODED_OFFSETS
    assert state_at(p, 4) is AK and state_at(p, 2) is AV
    got = fetch(p, "m2", log, now=3, max_records=20, mode=RL)
    assert got[0][0] == 2 and sum(last - first + 1 for first, last, _ in got) == 20
    assert infos(p) <= MAX_EXPLODED_OFFSETS
    # A member leaving, a lock expiring and the log start moving into the batch stay bounded too.
    p.release_member("m2", now_ms=4)
    assert state_at(p, 10) is AV
    fetch(p, "m3", log, now=5, max_records=7, mode=RL)
    p.on_timer(10**9)
    p.on_log_start_offset_moved(span // 2)
    assert infos(p) <= MAX_EXPLODED_OFFSETS + 64
    assert p.start_offset == span // 2
