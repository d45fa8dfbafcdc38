"""``first_record_at_or_after``: ListOffsets by timestamp answers with the first record late
enough inside the batch the log found, as Kafka does (table-driven over codecs)."""

from __future__ import annotations

import pytest

from protocol.record_batch import TIMESTAMP_TYPE_MASK
from protocol.record_timestamps import first_record_at_or_after
from tests.unit.batches import make_batch

T0 = 1_700_000_000_000
LIMIT = 1 << 20


def _two_batches(codec: int) -> bytes:
    # offsets 10..14 at T0+0,10,20,30,40 and 15..17 at T0+50,45,60 (out of order, as a producer
    # may write them)
    first = make_batch([(None, b"v")] * 5, base_offset=10, compression=codec,
                       timestamps=[T0 + 10 * i for i in range(5)])
    second = make_batch([(None, b"w")] * 3, base_offset=15, compression=codec,
                        timestamps=[T0 + 50, T0 + 45, T0 + 60])
    return first + second


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize(("target", "min_offset", "expected"), [
    (T0, 10, (10, T0)),
    (T0 + 15, 10, (12, T0 + 20)),
    (T0 + 40, 10, (14, T0 + 40)),
    (T0 + 41, 10, (15, T0 + 50)),
    (T0 + 46, 10, (15, T0 + 50)),
    (T0 + 55, 10, (17, T0 + 60)),
    (T0 + 61, 10, None),
    (T0, 13, (13, T0 + 30)),  # the log start offset inside the first batch
], ids=["first", "inside", "last-of-batch", "next-batch", "not-monotonic", "late", "none",
        "from-log-start"])
def test_first_record_at_or_after(codec: int, target: int, min_offset: int,
                                  expected: tuple[int, int] | None) -> None:
    assert first_record_at_or_after(_two_batches(codec), target, min_offset, LIMIT) == expected


def test_log_append_time_batches_answer_with_their_first_record() -> None:
    batch = make_batch([(None, b"v")] * 3, base_offset=4, timestamps=[T0, T0, T0 + 9],
                       attributes=TIMESTAMP_TYPE_MASK)
    assert first_record_at_or_after(batch, T0 + 5, 4, LIMIT) == (4, T0 + 9)


def test_unreadable_records_give_none() -> None:
    batch = bytearray(make_batch([(None, b"v")] * 3, base_offset=0,
                                 timestamps=[T0, T0 + 1, T0 + 2]))
    batch[61:] = b"\xff" * (len(batch) - 61)  # the records are garbage varints
    assert first_record_at_or_after(bytes(batch), T0 + 1, 0, LIMIT) is None
    assert first_record_at_or_after(b"\x00" * 10, T0, 0, LIMIT) is None
