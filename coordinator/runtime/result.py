"""The outcome of a coordinator write operation.

A write operation validates a request against the current (committed) state and returns the
records that express the change plus the response to send once those records are durable. It never
mutates state itself: replaying the records is the only way state changes (STYLE.md 1.3, after
Kafka's ``CoordinatorResult``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

R = TypeVar("R")
Rec = TypeVar("Rec")


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[Rec, R]):
    """Records to append (in order) and the response released after they commit.

    ``replay_records`` is False only for results whose records were already applied by the
    caller (kept for parity with Kafka; the runtime replays by default).
    """

    records: tuple[Rec, ...] = ()
    response: R | None = None
    replay_records: bool = True
    extra: dict[str, object] = field(default_factory=dict)
