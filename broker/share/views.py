"""Read-only views of a share-partition: its group config, per-offset state and metrics.

Nothing here changes state. ``SharePartitionConfig`` is what a share-partition reads through its
config callable on every operation, so a changed group config applies to the next call
(reference section 2: lock duration, delivery count limit and record-lock limit are per call).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.share.record_state import AckType, RecordState

__all__ = ["ConfigSource", "OffsetView", "ShareMetrics", "SharePartitionConfig"]


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    """The share-group configs a share-partition uses (Kafka 4.3 defaults)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    renew_enabled: bool = True
    # Shoal improvement (opt-in, SHARE_GROUPS.md section 3): only AVAILABLE/ACQUIRED records in
    # the window count toward max_record_locks, so one slow record at the SPSO does not stall the
    # partition. Kafka counts every offset, SPEO - SPSO + 1 (reference 3, "Record lock limit").
    count_only_inflight_toward_lock_limit: bool = False
    # Shoal extension (opt-in, SHARE_GROUPS.md section 3, broker/share/backoff.py): a record made
    # AVAILABLE again after delivery n waits min(max, backoff * multiplier^(n-1)) ms before it
    # can be acquired. 0 = Kafka's behaviour (at once).
    delivery_backoff_ms: int = 0
    delivery_backoff_max_ms: int = 60_000
    delivery_backoff_multiplier: float = 2.0
    # Shoal extension (opt-in, share.ordering=key, broker/share/key_order.py): at most one
    # record per key acquired at a time, a key's records in offset order.
    key_ordering: bool = False
    # KIP-1191 (errors.deadletterqueue.topic.name set, broker/share/dead_letter.py): REJECTed
    # and delivery-limit records go through ARCHIVING until their dead-letter record is durable.
    dead_letter: bool = False
    # share.isolation.level=read_committed: acquire only below the last stable offset and never
    # deliver records of aborted transactions (broker/share/txn_filter.py).
    read_committed: bool = False


#: Called on every operation; return the group's current config.
ConfigSource = Callable[[], SharePartitionConfig]


@dataclass(frozen=True, slots=True)
class OffsetView:
    """One cached offset. ``pending`` is the target of an ack still waiting for its write."""

    state: RecordState
    delivery_count: int
    member_id: str | None = None
    pending: RecordState | None = None
    deadline_ms: int | None = None
    # An AVAILABLE record in redelivery backoff: not acquirable before this time.
    available_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ShareMetrics:
    """Gauges and counters for the shell to export (SharePartitionMetrics plus Shoal extras).

    Counters (``lock_timeouts``, ``delivery_limit_archives``, ``acks``) count records and only
    grow; the rest are gauges at the time of the call.
    """

    start_offset: int
    end_offset: int
    in_flight_records: int  # cached offsets at/after the SPSO
    in_flight_batches: int  # cache entries (InFlightBatchCount)
    acquired_records: int
    delivery_complete_count: int
    oldest_unacked_acquired_at_ms: int | None
    lock_timeouts: int
    delivery_limit_archives: int
    acks: dict[AckType, int] = field(default_factory=dict)
    # Records archived here by REJECT/GAP acknowledgements or at the delivery limit (counter).
    archived_records: int = 0
    # KIP-1191: records archived once their dead-letter record was durable on the DLQ topic, and
    # records archived without one (the DLQ topic was missing or not allowed) (counters).
    dead_lettered_records: int = 0
    dead_letter_skipped_records: int = 0
    # Records in ARCHIVING now (gauge): waiting for their dead-letter record.
    archiving_records: int = 0
