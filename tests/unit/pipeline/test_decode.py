"""The executors' decoding of undecoded share-fetch partitions (pipeline/decode.py), checked
against the client's record decoder turned into rows the plain way (``Columns``/``to_arrow``)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the pipeline package needs the 'spark' extra")

import pyarrow as pa  # noqa: E402
from aiokafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from client.records import RawPartition, decode_partition  # noqa: E402
from pipeline.decode import CorruptBatchError, pack, pack_pieces, to_batches, unpack  # noqa: E402
from pipeline.rows import Columns, to_arrow  # noqa: E402
from pipeline.source import deal  # noqa: E402
from protocol.record_batch import control_batch  # noqa: E402

GZIP, LZ4, ZSTD = 1, 3, 4


def _batch(base: int, n: int, *, key: bytes | None = None, headers: tuple = (), codec: int = 0,
           value_size: int = 100, log_append_time: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i,
                 key=None if key is None else key + str(i).encode(),
                 value=(b"v%d" % i).ljust(value_size, b"x") if value_size else None,
                 headers=list(headers))
    buf = bytearray(b.build())
    buf[0:8] = base.to_bytes(8, "big")
    if log_append_time:
        buf[22] |= 0x08  # attributes low byte (outside the CRC check this decoder skips)
    return bytes(buf)


def _oracle(data: bytes, ranges: list[tuple[int, int, int]]) -> pa.Table:
    cols = Columns()
    cols.extend(decode_partition("t", 3, data, ranges).records)
    return pa.Table.from_batches([to_arrow(cols)])


def _decoded(data: bytes, ranges: list[tuple[int, int, int]]) -> pa.Table:
    batches = list(to_batches(pack([("t", 3, ranges, data)])))
    return pa.Table.from_batches(batches).combine_chunks()


@pytest.mark.parametrize(("data", "ranges"), [
    (_batch(100, 50) + _batch(150, 50), [(100, 199, 1)]),
    # the broker sends whole batches that reach past the acquired ranges
    (_batch(100, 50) + _batch(150, 50), [(110, 120, 2), (160, 170, 3)]),
    (_batch(0, 20, key=b"k", headers=(("h", b"1"), ("z", None))) + _batch(20, 5), [(0, 24, 1)]),
    (_batch(0, 10, value_size=0), [(0, 9, 1)]),
    (_batch(0, 30, codec=GZIP), [(5, 29, 4)]),
    (_batch(0, 30, codec=LZ4, key=b"kk"), [(0, 29, 1)]),
    (_batch(0, 30, codec=ZSTD, value_size=5000), [(0, 29, 1)]),
    (_batch(7, 3, log_append_time=True), [(7, 9, 1)]),
], ids=["whole", "ranges", "keys-headers", "null-values", "gzip", "lz4", "zstd", "append-time"])
def test_rows_match_the_record_by_record_decoding(data: bytes,
                                                  ranges: list[tuple[int, int, int]]) -> None:
    expected = _oracle(data, ranges)
    assert expected.num_rows > 0
    assert _decoded(data, ranges).equals(expected)


def test_control_batches_and_offsets_outside_the_ranges_give_no_rows() -> None:
    marker = bytearray(control_batch(1, 0, 0, True, 1_700_000_000_000))
    marker[0:8] = (5).to_bytes(8, "big")
    data = _batch(0, 5) + bytes(marker) + _batch(6, 4)
    rows = _decoded(data, [(2, 9, 1)])
    assert rows.column("offset").to_pylist() == [2, 3, 4, 6, 7, 8, 9]
    assert list(to_batches(pack([("t", 3, [(50, 60, 1)], data)]))) == []


def test_one_arrow_batch_per_payload_keeps_each_rows_topic_partition() -> None:
    payload = pack([("a", 0, [(0, 2, 1)], _batch(0, 3)), ("empty", 7, [(9, 9, 1)], _batch(0, 3)),
                    ("bb", 1, [(0, 0, 5)], _batch(0, 1))])
    (batch,) = to_batches(payload)
    rows = batch.to_pylist()
    assert [(r["topic"], r["partition"], r["offset"], r["deliveryCount"]) for r in rows] == [
        ("a", 0, 0, 1), ("a", 0, 1, 1), ("a", 0, 2, 1), ("bb", 1, 0, 5)]


def test_a_payload_past_the_batch_byte_limit_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.decode._MAX_BATCH_BYTES", 250)
    payload = pack([("a", 0, [(0, 2, 1)], _batch(0, 3)), ("b", 1, [(0, 1, 1)], _batch(0, 2))])
    batches = list(to_batches(payload))
    assert [b.column("topic").to_pylist() for b in batches] == [["a"] * 3, ["b"] * 2]


def test_payload_framing_round_trips_and_rejects_truncation() -> None:
    chunks = [("t", 2, [(0, 4, 1), (9, 9, 2)], _batch(0, 5)), ("ü", 0, [], b"")]
    payload = pack(chunks)
    assert b"".join(pack_pieces(chunks)) == payload
    back = unpack(payload)
    assert [(t, p, [tuple(r) for r in rs], bytes(d)) for t, p, rs, d in back] == chunks
    with pytest.raises(CorruptBatchError, match="truncated"):
        unpack(payload[:-3])


def test_corrupt_record_batches_name_the_partition() -> None:
    data = bytearray(_batch(0, 5))
    data[61] = 0x7F  # the first record's length varint now runs past the batch
    with pytest.raises(CorruptBatchError, match="t-3"):
        _decoded(bytes(data), [(0, 4, 1)])


def test_deal_keeps_topic_partitions_whole() -> None:
    held = [RawPartition("t", p, b"", ((0, 0, 1),)) for p in range(5)]
    assert deal(held, 0) == [[h] for h in held]
    assert deal(held, 2) == [[held[0], held[2], held[4]], [held[1], held[3]]]
    assert deal(held, 9) == [[h] for h in held]
