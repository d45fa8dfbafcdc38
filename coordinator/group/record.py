"""The group coordinator's record and the assignment structs its records share.

Concept (STYLE.md 1.3): every group kind's hard state on ``__consumer_offsets`` is the fold of
its records: share groups (``share/records.py``, types 10-15), consumer groups
(``consumer/records.py``, 3-8 and 16), classic groups (``classic/records.py``) and committed
offsets (``offsets.py``). A ``Record`` is a key (which entity) and a value (its new content) or
``None`` (a tombstone: the entity is gone); ``serde.py`` encodes each kind by its key's type.

Invariants: keys and values are frozen and hold only tuples, so records are hashable values;
``topic_partitions`` gives the canonical (sorted) form, so one logical state always yields
byte-identical records.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True, slots=True)
class Record:
    """One coordinator record: ``value is None`` is a tombstone."""

    key: Any  # a key class of one of the record modules (module doc)
    value: Any | None  # its value class

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """``TopicPartitions``/``TopicPartition`` struct: a topic id and partition indexes."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


Assignment: TypeAlias = Mapping[uuid.UUID, frozenset[int]]


def topic_partitions(assignment: Mapping[uuid.UUID, Iterable[int]]) -> tuple[TopicPartitions, ...]:
    """Canonical struct list for an assignment: topics by id, partitions sorted, empties dropped."""
    out = []
    for topic_id in sorted(assignment, key=lambda t: t.bytes):
        parts = tuple(sorted(set(assignment[topic_id])))
        if parts:
            out.append(TopicPartitions(topic_id, parts))
    return tuple(out)


def assignment_of(structs: Iterable[TopicPartitions]) -> dict[uuid.UUID, frozenset[int]]:
    """Inverse of ``topic_partitions`` (merges duplicate topics, drops empties)."""
    out: dict[uuid.UUID, set[int]] = {}
    for tp in structs:
        out.setdefault(tp.topic_id, set()).update(tp.partitions)
    return {t: frozenset(p) for t, p in out.items() if p}
