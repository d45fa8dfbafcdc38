"""Committed offsets of one ``__consumer_offsets`` partition: OffsetCommit records, OffsetFetch,
OffsetDelete and offsets retention.

Concept (after Kafka's ``OffsetMetadataManager``): the offsets of classic, consumer-protocol
(KIP-848) and simple (standalone or admin) groups, one store per partition. Who may commit is
decided by the group's own module (``classic/group.py`` for classic groups,
``consumer/groups.py`` for consumer groups); this module turns a validated commit into OffsetCommit records, answers
OffsetFetch from the committed view, tombstones offsets, and expires them after
``offsets.retention.ms``. Sans-IO: time comes in as ``now_ms``, retention deadlines go out
through the injected ``schedule``/``cancel``.

Hard state is the fold of records (STYLE.md 1.3): ``DurableStore`` holds the latest value of every
classic-record key (OffsetCommit and the classic groups' GroupMetadata, which share the key space
and the log) with an undo log back to the committed offset (``coordinator/runtime/undo.py``, as
the group stores of ``share/store.py``), so ``revert`` and committed reads work as for share groups.
Write ops append records to the list they are given and never change the store; ``replay`` is
its one mutator.

Retention (offsets.retention.minutes), as Kafka's offset expiration condition: an offset expires
once its commit timestamp is a retention period old, if nothing reads it. ``expiring(group_id)``
(injected) says which topics of the id's offsets may expire now: every topic (``EVERY_TOPIC``)
when the id has no group or an empty one; the topics the group does not subscribe to when it is
a Stable classic ``consumer`` group or a consumer-protocol group with members (Kafka's
``isSubscribedToTopic``); none (None) otherwise, e.g. while a classic group rebalances.
The check is a timer per group id: armed when a group becomes empty (or has no group at all) and
after each commit; for a group with members it is never postponed by a commit and comes back
every ``offsets_retention_check_interval_ms`` (Kafka's ``offsets.retention.check.interval.ms``),
so a topic dropped from the subscription is seen within one interval. When every offset of an
empty group is gone its metadata goes with the last one and ``forget(group_id)`` drops its soft
state; a group with members keeps its metadata.

Transactional offsets (TxnOffsetCommit) wait in ``txn_offsets.PendingOffsets`` until their
transaction's marker; a COMMIT replays them into the ``DurableStore`` with the offset of their
own record (``value_offset``), so pruning keeps that record and the marker after it. Reads and
deletions here take them into account: OffsetFetch with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for a partition with a pending offset, OffsetDelete and DeleteGroups
tombstone pending-only partitions too, and retention keeps those partitions and the group.

Invariants:
- offsets passed to ``DurableStore.replay`` increase; ``revert`` never goes below the committed
  offset, and the undo log holds only records at or above it while ``journaling`` is on (off
  while loading, as in ``share/store.py``);
- ``keys_per_group`` counts exactly the live keys of each group id, and ``offset_keys`` holds
  exactly its live OffsetCommit keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.group.classic import records as cr
from coordinator.group.record import Record
from coordinator.group.txn_offsets import PendingOffsets
from coordinator.runtime.undo import UndoLog

RETENTION_TIMER = "c-retention"

TimerSchedule = Callable[[tuple[str, ...], int], None]
TimerCancel = Callable[[tuple[str, ...]], None]
TimerDeadline = Callable[[tuple[str, ...]], "int | None"]
# Which topics of a group's offsets may expire: topic name -> may it.
TopicFilter = Callable[[str], bool]


def _every_topic(_topic: str) -> bool:
    return True


EVERY_TOPIC: TopicFilter = _every_topic  # no group, or an empty one: every offset may expire


def _no_deadline(_key: tuple[str, ...]) -> int | None:
    return None


class OffsetsSettings(Protocol):
    """The per-group settings offsets need (``classic.ClassicSettings`` has them)."""

    @property
    def offset_metadata_max_bytes(self) -> int: ...

    @property
    def offsets_retention_ms(self) -> int: ...

    @property
    def offsets_retention_check_interval_ms(self) -> int: ...


# ------------------------------------------------------------------------ requests / responses


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    error_code: ErrorCode  # group-level: applies to every partition when not none
    partitions: tuple[tuple[str, int, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


# ------------------------------------------------------------------------ durable store


@dataclass(frozen=True, slots=True)
class _Undo:
    offset: int
    key: cr.ClassicKey
    before: cr.ClassicValue | None
    before_offset: int | None

    @property
    def ident(self) -> cr.ClassicKey:
        return self.key


class DurableStore:
    """Classic records folded by key (latest value per key) with an undo log to the committed
    offset. Offsets of the log are shared with the share-group store. ``keys_per_group`` counts
    the live keys of each group id, so "is this id a classic group" is one lookup (it is asked on
    every share heartbeat)."""

    def __init__(self) -> None:
        self.values: dict[cr.ClassicKey, cr.ClassicValue] = {}
        self.key_offsets: dict[cr.ClassicKey, int] = {}
        self.keys_per_group: dict[str, int] = {}
        # Live OffsetCommit keys by group id, so one group's offsets are found without a scan.
        self._offset_keys: dict[str, set[cr.OffsetCommitKey]] = {}
        self.undo: UndoLog[_Undo] = UndoLog()
        self.journaling = True

    def offset_keys(self, group_id: str) -> set[cr.OffsetCommitKey]:
        """The group's live OffsetCommit keys (a copy)."""
        return set(self._offset_keys.get(group_id, ()))

    def _set(self, key: cr.ClassicKey, value: cr.ClassicValue, offset: int) -> None:
        if key not in self.values:
            self.keys_per_group[key.group_id] = self.keys_per_group.get(key.group_id, 0) + 1
            if isinstance(key, cr.OffsetCommitKey):
                self._offset_keys.setdefault(key.group_id, set()).add(key)
        self.values[key] = value
        self.key_offsets[key] = offset

    def _drop(self, key: cr.ClassicKey) -> None:
        if self.values.pop(key, None) is not None:
            if isinstance(key, cr.OffsetCommitKey):
                keys = self._offset_keys[key.group_id]
                keys.discard(key)
                if not keys:
                    del self._offset_keys[key.group_id]
            left = self.keys_per_group[key.group_id] - 1
            if left:
                self.keys_per_group[key.group_id] = left
            else:
                del self.keys_per_group[key.group_id]
        self.key_offsets.pop(key, None)

    def replay(self, offset: int, key: cr.ClassicKey, value: cr.ClassicValue | None,
               value_offset: int | None = None) -> None:
        """Apply a record at ``offset``; ``value_offset`` is where the value's own record sits
        when it differs (a transactional offset committed by a later marker)."""
        if self.journaling:
            self.undo.append(_Undo(offset, key, self.values.get(key), self.key_offsets.get(key)))
        if value is None:
            self._drop(key)
        else:
            self._set(key, value, offset if value_offset is None else value_offset)

    def commit(self, offset: int) -> None:
        self.undo.commit(offset)

    def revert(self, offset: int) -> None:
        self.undo.revert(offset, self._restore)

    def _restore(self, e: _Undo) -> None:
        if e.before is None:
            self._drop(e.key)
        else:
            assert e.before_offset is not None
            self._set(e.key, e.before, e.before_offset)

    def committed(self, key: cr.ClassicKey) -> cr.ClassicValue | None:
        value: cr.ClassicValue | None = self.undo.committed(key, self.values.get(key))
        return value

    def committed_items(self) -> dict[cr.ClassicKey, cr.ClassicValue]:
        return self.undo.committed_view(self.values)

    def lowest_live_offset(self) -> int | None:
        offsets = dict(self.key_offsets)
        for e in self.undo.newest_first():
            if e.before_offset is None:
                offsets.pop(e.key, None)
            else:
                offsets[e.key] = e.before_offset
        return min(offsets.values()) if offsets else None

    def clear(self) -> None:
        self.values.clear()
        self.key_offsets.clear()
        self.keys_per_group.clear()
        self._offset_keys.clear()
        self.undo.clear()


class CommittedOffsets:
    """Committed offsets of one coordinator partition (see the module docstring)."""

    def __init__(self, store: DurableStore, *, settings: Callable[[str], OffsetsSettings],
                 schedule: TimerSchedule, cancel: TimerCancel,
                 expiring: Callable[[str], TopicFilter | None], forget: Callable[[str], None],
                 pending: PendingOffsets | None = None,
                 deadline: TimerDeadline = _no_deadline) -> None:
        """``expiring(group_id)``: which topics of the id's offsets may expire now (see the
        module doc). ``forget(group_id)``: drop the group's soft state once its last offset
        expired. ``deadline(key)``: when the timer ``key`` is due, or None."""
        self.store = store
        self._settings = settings
        self._schedule = schedule
        self._cancel = cancel
        self._deadline = deadline
        self._expiring = expiring
        self._forget = forget
        self.pending = pending if pending is not None else PendingOffsets()

    # -------------------------------------------------------------- reads

    def fetch_offsets(self, group_id: str,
                      topics: Sequence[tuple[str, Sequence[int]]] | None,
                      require_stable: bool = False) -> OffsetFetchResponse:
        """Committed offsets (committed view); ``topics`` None = every partition of the group
        (a scan of the partition's offsets; named partitions are looked up one by one). With
        ``require_stable`` a partition with a pending transactional offset answers
        UNSTABLE_OFFSET_COMMIT (Kafka's OffsetFetch v7+)."""
        if require_stable:
            unstable = self.pending.unstable_keys(group_id)
            if unstable:
                return self._unstable(self.fetch_offsets(group_id, topics), unstable)
        out: list[FetchedOffset] = []
        if topics is None:
            items = {k: v for k, v in self.store.committed_items().items()
                     if isinstance(k, cr.OffsetCommitKey) and k.group_id == group_id}
            for k in sorted(items, key=lambda k: (k.topic, k.partition)):
                v = items[k]
                assert isinstance(v, cr.OffsetCommitValue)
                out.append(FetchedOffset(k.topic, k.partition, v.offset, v.leader_epoch,
                                         v.metadata))
        else:
            for topic, parts in topics:
                for p in parts:
                    value = self.store.committed(cr.OffsetCommitKey(group_id, topic, p))
                    if isinstance(value, cr.OffsetCommitValue):
                        out.append(FetchedOffset(topic, p, value.offset, value.leader_epoch,
                                                 value.metadata))
                    else:
                        out.append(FetchedOffset(topic, p, -1, -1, ""))
        return OffsetFetchResponse(ErrorCode.none, tuple(out))

    @staticmethod
    def _unstable(res: OffsetFetchResponse,
                  keys: set[cr.OffsetCommitKey]) -> OffsetFetchResponse:
        pending = {(k.topic, k.partition) for k in keys}
        return OffsetFetchResponse(res.error_code, tuple(
            FetchedOffset(p.topic, p.partition, -1, -1, "", ErrorCode.unstable_offset_commit)
            if (p.topic, p.partition) in pending else p for p in res.partitions))

    def committed_offsets(self) -> dict[str, list[FetchedOffset]]:
        """Every group's committed offsets (committed view), by group id, in one scan of the
        partition's offsets (the metrics collector reads them at scrape time)."""
        out: dict[str, list[FetchedOffset]] = {}
        for k, v in self.store.committed_items().items():
            if isinstance(k, cr.OffsetCommitKey) and isinstance(v, cr.OffsetCommitValue):
                out.setdefault(k.group_id, []).append(
                    FetchedOffset(k.topic, k.partition, v.offset, v.leader_epoch, v.metadata))
        for offsets in out.values():
            offsets.sort(key=lambda o: (o.topic, o.partition))
        return out

    # -------------------------------------------------------------- writes

    def write_offsets(self, group_id: str, parts: Sequence[OffsetCommitPartition], now_ms: int,
                      records: list[Record]) -> OffsetCommitResponse:
        """OffsetCommit records for a validated commit (classic groups are validated by
        ``classic/group.py``, consumer-protocol groups by the shard); metadata over
        ``offset.metadata.max.bytes`` gets OFFSET_METADATA_TOO_LARGE for its partition."""
        s = self._settings(group_id)
        out = []
        for p in parts:
            meta = p.metadata or ""
            if len(meta.encode("utf-8")) > s.offset_metadata_max_bytes:
                out.append((p.topic, p.partition, ErrorCode.offset_metadata_too_large))
                continue
            # Record's annotation names the share record types; it carries classic ones too.
            key: Any = cr.OffsetCommitKey(group_id, p.topic, p.partition)
            value: Any = cr.OffsetCommitValue(p.offset, p.leader_epoch, meta, now_ms)
            records.append(Record(key, value))
            out.append((p.topic, p.partition, ErrorCode.none))
        self.arm_retention(group_id, now_ms)
        return OffsetCommitResponse(ErrorCode.none, tuple(out))

    def delete_partitions(self, group_id: str, parts: Sequence[tuple[str, int]],
                          subscribed: Callable[[str], bool], records: list[Record]
                          ) -> tuple[tuple[str, int, ErrorCode], ...]:
        """OffsetDelete of a group the caller allowed: partitions of topics the group
        ``subscribed`` to get GROUP_SUBSCRIBED_TO_TOPIC, the others' offsets are tombstoned."""
        out = []
        for topic, p in parts:
            if subscribed(topic):
                out.append((topic, p, ErrorCode.group_subscribed_to_topic))
                continue
            key = cr.OffsetCommitKey(group_id, topic, p)
            if key in self.store.values or self.pending.has(key):
                records.append(Record(key, None))
            out.append((topic, p, ErrorCode.none))
        return tuple(out)

    def delete_all(self, group_id: str, records: list[Record]) -> None:
        """Tombstones for every offset of a deleted group, then its GroupMetadata; its
        retention timer is cancelled."""
        keys = {k for k in self.store.values
                if isinstance(k, cr.OffsetCommitKey) and k.group_id == group_id}
        keys |= self.pending.keys(group_id)  # pending-only partitions need a tombstone too
        for key in sorted(keys, key=lambda k: (k.topic, k.partition)):
            records.append(Record(key, None))
        gkey = cr.GroupMetadataKey(group_id)
        if gkey in self.store.values:
            records.append(Record(gkey, None))
        self._cancel((RETENTION_TIMER, group_id))

    # -------------------------------------------------------------- retention

    def arm_retention(self, group_id: str, now_ms: int, *, emptied: bool = False) -> None:
        """Start (or move) the offsets retention check of a group whose offsets may expire; a
        group with members keeps an earlier check (its commits would postpone it for ever).
        ``emptied``: the caller's op removes the group's last member (its records are not
        replayed yet, so the group still looks busy); the expiry re-checks anyway."""
        topics = EVERY_TOPIC if emptied else self._expiring(group_id)
        if topics is None:
            return
        key = (RETENTION_TIMER, group_id)
        s = self._settings(group_id)
        if topics is EVERY_TOPIC:
            self._schedule(key, now_ms + s.offsets_retention_ms)
            return
        due = now_ms + min(s.offsets_retention_ms, s.offsets_retention_check_interval_ms)
        current = self._deadline(key)
        if current is None or due < current:
            self._schedule(key, due)

    def expire_offsets(self, group_id: str, now_ms: int, records: list[Record]) -> None:
        """offsets.retention.minutes: the offsets ``expiring`` allows that are a retention period
        past their commit timestamp go; an empty group's metadata goes with its last offset, a
        group with members is looked at again (see the module doc)."""
        topics = self._expiring(group_id)
        if topics is None:
            return
        s = self._settings(group_id)
        retention = s.offsets_retention_ms
        left = 0
        soonest: int | None = None
        for key in sorted(self.store.offset_keys(group_id),
                          key=lambda k: (k.topic, k.partition)):
            value = self.store.values[key]
            assert isinstance(value, cr.OffsetCommitValue)
            if not topics(key.topic):
                left += 1
                continue
            due = value.commit_timestamp + retention
            if due <= now_ms and self.pending.has(key):
                # As Kafka, an offset with a pending transactional one waits for its marker
                # (looked at again one retention period later).
                due = now_ms + retention
            if due <= now_ms:
                records.append(Record(key, None))
            else:
                left += 1
                soonest = due if soonest is None else min(soonest, due)
        timer = (RETENTION_TIMER, group_id)
        if topics is not EVERY_TOPIC:
            # A group with members: its subscription may change; look again within an interval.
            again = now_ms + min(retention, s.offsets_retention_check_interval_ms)
            self._schedule(timer, again if soonest is None else min(soonest, again))
        elif left == 0 and self.pending.has_group(group_id):
            # Only pending transactional offsets left: keep the group until their marker.
            self._schedule(timer, now_ms + retention)
        elif left == 0:
            gkey = cr.GroupMetadataKey(group_id)
            if gkey in self.store.values:
                records.append(Record(gkey, None))
            self._forget(group_id)
        elif soonest is not None:
            self._schedule(timer, soonest)
