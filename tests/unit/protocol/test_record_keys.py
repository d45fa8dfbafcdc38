"""Record keys of v2 batches (protocol/record_keys.py), for share.ordering=key: the compiled
reader (aiokafka's) and the pure-Python scan give the same keys and record layouts, and both
treat a batch they cannot read as keyless."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import record_keys
from protocol.record_batch import crc_ok, iter_batches
from protocol.record_keys import BatchKeys, Layout, record_key_hashes, trim_batch
from tests.unit.batches import make_batch

Records = list[tuple[bytes | None, bytes | None]]


@pytest.fixture(params=["compiled", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "compiled":
        assert record_keys.COMPILED, "aiokafka's compiled record reader is not installed"
    monkeypatch.setattr(record_keys, "COMPILED", request.param == "compiled")
    yield request.param


def read(data: bytes, compiled: bool) -> tuple[dict[int, int | None], dict[int, Layout]]:
    """Every key of ``data`` and the layouts kept, with the reader chosen."""
    saved = record_keys.COMPILED
    record_keys.COMPILED = compiled
    try:
        memo: dict[int, int | None] = {}
        layouts: dict[int, Layout] = {}
        keys = BatchKeys(data, list(iter_batches(data)), 1 << 20, memo, layouts)
        for _pos, h in iter_batches(data):
            keys.get(h.base_offset)
        return memo, layouts
    finally:
        record_keys.COMPILED = saved


small = st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=100, max_size=300))


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(small, small), min_size=1, max_size=40),
                        min_size=1, max_size=4),
       base=st.integers(0, 1 << 40))
def test_compiled_and_python_readers_agree(batches: list[Records], base: int) -> None:
    data = b""
    expected: dict[int, int | None] = {}
    offset = base
    for records in batches:
        data += make_batch(records, base_offset=offset)
        for i, (key, _value) in enumerate(records):
            expected[offset + i] = None if key is None else hash(key)
        offset += len(records)
    assert read(data, compiled=True) == read(data, compiled=False)
    assert read(data, compiled=True)[0] == expected


def test_reads_keys_of_a_trimmed_batch(reader: str) -> None:
    # A trimmed batch (as keyed responses send, and compaction leaves) has gaps in its offsets.
    data = make_batch([(f"k{i}".encode(), b"v" * i) for i in range(10)], base_offset=40)
    ((pos, h),) = list(iter_batches(data))
    _keys, layouts = read(data, compiled=reader == "compiled")
    cut = trim_batch(data, pos, h, 43, 45, layouts[40])
    assert cut is not None
    ((pos2, h2),) = list(iter_batches(cut))
    assert crc_ok(cut, pos2, h2)
    memo, cut_layouts = read(cut, compiled=reader == "compiled")
    assert memo == {o: hash(f"k{o - 40}".encode()) for o in (43, 44, 45)}
    assert cut_layouts[40][0] == [43, 44, 45]


@pytest.mark.parametrize("damage", ["truncated record", "record length", "record count"])
def test_an_unreadable_batch_is_keyless(reader: str, damage: str) -> None:
    good = make_batch([(b"a", b"v")], base_offset=0)
    broken = bytearray(make_batch([(b"b", b"v"), (b"c", b"vv")], base_offset=1))
    if damage == "truncated record":
        broken = broken[:-3]
        broken[8:12] = (len(broken) - 12).to_bytes(4, "big")  # the batch length, still framed
    elif damage == "record length":
        broken[61] = 0x7F  # the first record claims more bytes than the batch has
    else:
        broken[57:61] = (5).to_bytes(4, "big")  # the header counts 5 records, 2 are there
    assert record_key_hashes(good + bytes(broken), 0, 1 << 20) == {0: hash(b"a")}
