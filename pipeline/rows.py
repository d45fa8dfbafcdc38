"""The rows the source produces: Spark's Kafka-source columns plus ``deliveryCount``.

The source builds its Arrow batches on the executors straight from the broker's record batches
(``pipeline/decode.py``); ``Columns``/``to_arrow`` build the same rows from Python values (the
bench's ceiling source, and tests as an oracle).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Spark's Kafka source schema (with includeHeaders=true) plus the share group's delivery count.
SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int, "
              "headers array<struct<key: string, value: binary>>, deliveryCount int")


@dataclass(slots=True)
class Columns:
    """One Spark partition's worth of records, column by column."""

    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    topic: list[str] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    timestamp_ms: list[int] = field(default_factory=list)
    timestamp_type: list[int] = field(default_factory=list)
    headers: list[list[dict[str, Any]]] = field(default_factory=list)
    delivery_count: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)

    def extend(self, records: Sequence[Any]) -> None:
        """Append ``client.ShareRecord``s (one pass per column: no per-record call)."""
        self.key.extend([r.key for r in records])
        self.value.extend([r.value for r in records])
        self.topic.extend([r.topic for r in records])
        self.partition.extend([r.partition for r in records])
        self.offset.extend([r.offset for r in records])
        self.timestamp_ms.extend([r.timestamp for r in records])
        self.timestamp_type.extend([r.timestamp_type for r in records])
        self.headers.extend([[{"key": k, "value": v} for k, v in r.headers] if r.headers else []
                             for r in records])
        self.delivery_count.extend([r.delivery_count for r in records])


def to_arrow(cols: Columns) -> Any:
    """One ``pyarrow.RecordBatch`` in the source's schema (pyarrow imported on first use)."""
    # Lazy: pyarrow is optional (the spark extra) and heavy.
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.RecordBatch.from_arrays([
        pa.array(cols.key, pa.binary()),
        pa.array(cols.value, pa.binary()),
        pa.array(cols.topic, pa.string()),
        pa.array(cols.partition, pa.int32()),
        pa.array(cols.offset, pa.int64()),
        pa.array([t * 1000 for t in cols.timestamp_ms], pa.timestamp("us", tz="UTC")),
        pa.array(cols.timestamp_type, pa.int32()),
        pa.array(cols.headers, _HEADERS_TYPE()),
        pa.array(cols.delivery_count, pa.int32()),
    ], names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
              "headers", "deliveryCount"])


def _HEADERS_TYPE() -> Any:
    # Lazy: as in to_arrow.
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def headers_of(value: Iterable[Any] | None) -> list[tuple[str, bytes | None]]:
    """Headers of a row given to the writer: a list of (key, value) structs or pairs, or None."""
    if value is None:
        return []
    out: list[tuple[str, bytes | None]] = []
    for h in value:
        if isinstance(h, dict):
            k, v = h.get("key"), h.get("value")
        elif hasattr(h, "asDict"):
            d = h.asDict()
            k, v = d.get("key"), d.get("value")
        else:
            k, v = h
        if k is None:
            raise ValueError("a header needs a key")
        out.append((str(k), None if v is None else bytes(v)))
    return out
