"""``ShardBase``: what every part of ``GroupCoordinatorShard`` shares.

The shard (``coordinator/group/shard.py``, which documents the whole) is one class made of parts,
one per group kind (``share/shard_ops.py``, ``consumer/shard_ops.py``, ``classic/shard_ops.py``
with committed offsets) over this base: the three stores, the timer and its dispatch, the
committed reads, replay / commit / revert of records, load and unload, and the deferred classic
answers. The op results and their helpers live here too (``shard.py`` re-exports them).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from kio.schema.errors import ErrorCode

from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group.classic.groups import ClassicGroups
from coordinator.group.consumer import groups as cgs
from coordinator.group.consumer import heartbeat as ch
from coordinator.group.consumer import records as cgr
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.groups import ConsumerGroups
from coordinator.group.share import heartbeat as hb
from coordinator.group.share import records as r
from coordinator.group.share.group import GroupState, ShareGroup
from coordinator.group.share.heartbeat import (
    ShareGroupSettings,
    ShareStateDeletion,
    ShareStateInitialization,
    Txn,
)
from coordinator.group.share.store import GroupStore
from coordinator.group.topics_image import TopicsImage
from coordinator.runtime.result import CoordinatorResult
from coordinator.runtime.timer import Timer

TimerKey: TypeAlias = tuple[str, ...]
SESSION = "session"
INIT_RETRY = "init-retry"
INITIALIZE_EXTRA = "initialize"  # CoordinatorResult.extra key; see initializations()
DELETE_EXTRA = "delete-state"  # CoordinatorResult.extra key; see deletions()

ASSIGNOR_NAME = "simple"  # ShareGroupDescribe AssignorName; the only share assignor
GROUP_TYPE = "share"  # ListGroups GroupType
PROTOCOL_TYPE = "share"  # ListGroups ProtocolType


def initializations(result: CoordinatorResult[Any, Any]) -> tuple[ShareStateInitialization, ...]:
    """Share-state initialisations requested by a write op (empty if none)."""
    value = result.extra.get(INITIALIZE_EXTRA, ())
    assert isinstance(value, tuple)
    return value


def deletions(result: CoordinatorResult[Any, Any]) -> tuple[ShareStateDeletion, ...]:
    """Share state of deleted topics a write op asks to delete (empty if none)."""
    value = result.extra.get(DELETE_EXTRA, ())
    assert isinstance(value, tuple)
    return value


# --------------------------------------------------------------------------- responses


@dataclass(frozen=True, slots=True)
class DescribeResult:
    """``group`` is the committed ShareGroup value (members, epochs, assignments by topic id)."""

    error_code: ErrorCode
    group: ShareGroup | None = None
    error_message: str | None = None
    assignor_name: str = ASSIGNOR_NAME

    @property
    def state(self) -> str:
        return self.group.state.value if self.group is not None else GroupState.DEAD.value


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    state: str  # "Empty" | "Stable"
    group_type: str = GROUP_TYPE
    protocol_type: str = PROTOCOL_TYPE


@dataclass(frozen=True, slots=True)
class TimerOutcome:
    expired_members: tuple[tuple[str, str], ...] = ()  # (group id, member id) fenced
    retried_initializations: tuple[str, ...] = ()  # group ids whose Initializing was cleared


@dataclass(frozen=True, slots=True)
class DeleteGroupResponse:
    error_code: ErrorCode
    error_message: str | None = None
    # Initialized share-partitions whose durable state the caller should delete
    # (DeleteShareGroupState via the persister).
    share_state_to_delete: Mapping[uuid.UUID, frozenset[int]] | None = None


@dataclass(frozen=True, slots=True)
class InitializeResponse:
    error_code: ErrorCode
    error_message: str | None = None
    initialization: ShareStateInitialization | None = None


def _default_settings(_group_id: str) -> ShareGroupSettings:
    return ShareGroupSettings()


def _no_foreign_groups(_group_id: str) -> bool:
    return False


MemberRemoved = Callable[[str, str], None]


def _default_classic(_group_id: str) -> cl.ClassicSettings:
    return cl.ClassicSettings()


def _drop_delivery(_waiter: int, _response: Any) -> None:
    pass


def _default_consumer(_group_id: str) -> ch.ConsumerGroupSettings:
    return ch.ConsumerGroupSettings()


@dataclass(frozen=True, slots=True)
class ConsumerDescribeResult:
    """ConsumerGroupDescribe of one id: the committed group, or an error."""

    error_code: ErrorCode
    group: ConsumerGroup | None = None
    error_message: str | None = None
    assignor_name: str = ""


class ShardBase:
    """The state of one coordinator partition and its record plumbing (see the module doc)."""

    def __init__(
        self,
        *,
        group_config: Callable[[str], ShareGroupSettings] = _default_settings,
        is_non_share_group: Callable[[str], bool] = _no_foreign_groups,
        timer: Timer[TimerKey] | None = None,
        require_share_state_initialization: bool = True,
        initialize_retry_interval_ms: int = 30_000,
        loading: bool = False,
        on_member_removed: MemberRemoved | None = None,
        classic_config: Callable[[str], cl.ClassicSettings] = _default_classic,
        deliver: cl.Deliver = _drop_delivery,
        consumer_config: Callable[[str], ch.ConsumerGroupSettings] = _default_consumer,
        on_consumer_member_removed: MemberRemoved | None = None,
    ) -> None:
        """
        Args:
            group_config: settings for a group id, called on every op (dynamic configs).
            is_non_share_group: True if the id is taken by a classic/consumer/streams group;
                such ids get GROUP_ID_NOT_FOUND, as Kafka answers.
            timer: the timer to use (tests may inject one); a fresh one by default.
            require_share_state_initialization: gate assignment on the two-phase initialisation.
            initialize_retry_interval_ms: how long a partition may stay Initializing.
            loading: start in the loading state (ops answer COORDINATOR_LOAD_IN_PROGRESS until
                ``on_loaded``); the runtime's loader replays the log first.
            on_member_removed: called with (group id, member id) from ``commit`` once a member's
                removal is durable; it must not raise (the runtime's commit path calls it).
            classic_config: classic-group settings for a group id (``classic/group.py``).
            consumer_config: consumer-group settings for a group id (``consumer/groups.py``).
            on_consumer_member_removed: as ``on_member_removed``, for consumer-group members.
            deliver: called with (waiter, response) for deferred classic-group answers (a
                JoinGroup or follower SyncGroup answered by a later op or timer), once the
                records of the op that produced them are committed; it must not raise.
        """
        self._store = GroupStore(journaling=not loading)
        self._group_config = group_config
        self._is_non_share_group = is_non_share_group
        self._timer: Timer[TimerKey] = timer if timer is not None else Timer()
        self._gated = require_share_state_initialization
        self._init_retry_ms = initialize_retry_interval_ms
        self._loaded = not loading
        self._on_member_removed = on_member_removed
        self._deliver = deliver
        # (offset the answer waits for, waiter, response): deferred classic answers.
        self._deliveries: list[tuple[int, int, Any]] = []
        self.classic = ClassicGroups(settings=classic_config, schedule=self._schedule,
                                        cancel=self._cancel,
                                        subscriptions=self._consumer_subscriptions,
                                        deadline=lambda key: self._timer.deadline(key))
        self.classic.store.journaling = not loading
        # Consumer-protocol (KIP-848) groups; their offsets are kept by ``classic.offsets``.
        self._consumer_config = consumer_config
        self._on_consumer_member_removed = on_consumer_member_removed
        self.consumer = ConsumerGroups(settings=consumer_config, schedule=self._schedule,
                                       journaling=not loading, cancel=self._cancel,
                                       armed=lambda key: key in self._timer)
        # The last topics image an op brought: timers run without one, and a downgrade by a
        # session timeout needs topic names for the classic assignments it writes.
        self._topics_seen = TopicsImage()
        # (group, member) moved to a classic group by a downgrade: their consumer records'
        # tombstones are no removal to report.
        self._migrated: set[tuple[str, str]] = set()

    def _schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self._timer.schedule(key, deadline_ms)  # through self: on_unloaded replaces the timer

    def _cancel(self, key: TimerKey) -> None:
        self._timer.cancel(key)

    def _consumer_subscriptions(self, group_id: str) -> frozenset[str] | None:
        """The topics a consumer-protocol group with members subscribes to (names and resolved
        regexes), or None when the id is not such a group (offsets retention)."""
        group = self.consumer.group(group_id)
        if group is None or not group.members:
            return None
        return group.subscribed_topic_names()

    @property
    def _groups(self) -> dict[str, ShareGroup]:
        return self._store.groups

    # ------------------------------------------------------------------ reads

    @property
    def groups(self) -> Mapping[str, ShareGroup]:
        """Latest replayed groups by id, committed or not (a copy; values are immutable)."""
        return dict(self._groups)

    def group(self, group_id: str) -> ShareGroup | None:
        """The latest replayed value of a group (what write ops see)."""
        return self._groups.get(group_id)

    @property
    def committed_groups(self) -> Mapping[str, ShareGroup]:
        """Groups by id as of the committed offset (a copy)."""
        return self._store.committed_groups()

    def committed_group(self, group_id: str) -> ShareGroup | None:
        """A group as of the committed offset (what clients may be told)."""
        group: ShareGroup | None = self._store.committed_group(group_id)
        return group

    @property
    def end_offset(self) -> int:
        """The offset after the last replayed record."""
        return self._store.end_offset

    @property
    def committed_offset(self) -> int:
        return self._store.committed_offset

    @property
    def loaded(self) -> bool:
        """False between construction with ``loading=True`` and ``on_loaded`` (ListGroups should
        then answer COORDINATOR_LOAD_IN_PROGRESS)."""
        return self._loaded

    @property
    def timer(self) -> Timer[TimerKey]:
        return self._timer

    def next_deadline(self) -> int | None:
        """Earliest timer deadline (ms), or None: the shell arms ``loop.call_at`` for it."""
        return self._timer.next_deadline()

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[ListedGroup]:
        """Share groups sorted by id; ``states_filter`` matches state names case-insensitively
        (ListGroups v4+ StatesFilter; empty or None = all). Committed groups only."""
        wanted = {s.lower() for s in states_filter} if states_filter else None
        groups = self._store.committed_groups()
        out = []
        for gid in sorted(groups):
            state = groups[gid].state.value
            if wanted is None or state.lower() in wanted:
                out.append(ListedGroup(gid, state))
        consumer = self.consumer.list_groups()
        for gid, state in consumer:
            if wanted is None or state.lower() in wanted:
                out.append(ListedGroup(gid, state, cgs.GROUP_TYPE, cgs.PROTOCOL_TYPE))
        consumer_ids = {gid for gid, _ in consumer} | set(self.consumer.store.groups)
        for gid, state, protocol_type in self.classic.list_groups():
            if gid in consumer_ids:  # its committed offsets: listed as the consumer group
                continue
            if wanted is None or state.lower() in wanted:
                out.append(ListedGroup(gid, state, cl.GROUP_TYPE, protocol_type))
        out.sort(key=lambda g: g.group_id)
        return out

    # ------------------------------------------------------------------ replay

    def replay(self, offset: int, key: r.RecordKey, value: r.RecordValue | None) -> None:
        """Apply the record at log ``offset``: the only way group state changes.

        Raises:
            ValueError: ``offset`` is below one already replayed.
            TypeError: ``key`` is not a share-group record key.
        """
        if isinstance(key, (cr.OffsetCommitKey, cr.GroupMetadataKey)):
            if offset < self._store.end_offset:
                raise ValueError(f"replay at offset {offset} below the end offset "
                                 f"{self._store.end_offset}")
            self.classic.replay(offset, key, value)
            self._store.end_offset = offset + 1
            return
        if isinstance(key, cgr.CONSUMER_KEYS):
            if offset < self._store.end_offset:
                raise ValueError(f"replay at offset {offset} below the end offset "
                                 f"{self._store.end_offset}")
            self.consumer.store.replay(offset, key, value)
            self._store.end_offset = offset + 1
            return
        self._store.replay(offset, key, value)

    def replay_transactional(self, offset: int, producer_id: int, producer_epoch: int,
                             key: r.RecordKey, value: r.RecordValue | None) -> None:
        """A record of ``producer_id``'s transaction at log ``offset``: an OffsetCommit waits
        in the pending offsets until the marker (a tombstone applies at once, as Kafka's
        replay does; other record types are not transactional and replay as usual).

        Raises:
            ValueError: ``offset`` is below one already replayed.
        """
        if not isinstance(key, cr.OffsetCommitKey) or value is None:
            self.replay(offset, key, value)
            return
        if offset < self._store.end_offset:
            raise ValueError(f"replay at offset {offset} below the end offset "
                             f"{self._store.end_offset}")
        self.classic.replay_transactional(offset, producer_id, producer_epoch, key,
                                          value)
        self._store.end_offset = offset + 1

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        """The end-transaction marker of ``producer_id`` at log ``offset``: its pending
        offsets become committed (``commit``) or are dropped.

        Raises:
            ValueError: ``offset`` is below one already replayed.
        """
        if offset < self._store.end_offset:
            raise ValueError(f"replay at offset {offset} below the end offset "
                             f"{self._store.end_offset}")
        self.classic.replay_end_transaction(offset, producer_id, commit)
        self._store.end_offset = offset + 1

    def end_transaction_error(self, producer_id: int, producer_epoch: int) -> ErrorCode | None:
        """A marker older than the producer's pending transaction here is refused
        (INVALID_PRODUCER_EPOCH, as Kafka's log refuses a marker of an older epoch)."""
        epoch = self.classic.pending.epoch(producer_id)
        if epoch is not None and producer_epoch < epoch:
            return ErrorCode.invalid_producer_epoch
        return None

    def replay_record(self, record: r.Record) -> None:
        """Replay ``record`` at the next offset and commit it at once (no log behind it)."""
        offset = self._store.end_offset
        self.replay(offset, record.key, record.value)
        self.commit(offset + 1)

    def commit(self, offset: int) -> None:
        """Every record below ``offset`` is durable; reports durable member removals."""
        removed = self._store.commit(offset)
        self.classic.store.commit(offset)
        self.classic.pending.commit(offset)
        gone = self.consumer.store.commit(offset)
        if self._on_consumer_member_removed is not None:
            for gid, mid in gone:
                if (gid, mid) in self._migrated:
                    self._migrated.discard((gid, mid))
                    continue
                self._on_consumer_member_removed(gid, mid)
        self._release_deliveries()
        if self._on_member_removed is not None:
            for gid, mid in removed:
                self._on_member_removed(gid, mid)

    def revert(self, offset: int) -> None:
        """Undo every record replayed at ``offset`` or later (a failed append or fsync).

        Timers armed by the reverted ops stay armed: their handlers re-check the state.

        Raises:
            ValueError: ``offset`` is below the committed offset.
        """
        self._store.revert(offset)
        self.classic.store.revert(offset)
        self.classic.pending.revert(offset)
        self.consumer.store.revert(offset)
        kept = []
        for threshold, waiter, response in self._deliveries:
            if threshold > offset:
                self._deliver(waiter, cl.PENDING)  # the caller answers with an error
            else:
                kept.append((threshold, waiter, response))
        self._deliveries = kept

    def last_redundant_offset(self) -> int | None:
        """Records below this offset are not needed to rebuild the committed groups."""
        share = self._store.last_redundant_offset()
        classic = self.classic.store.lowest_live_offset()
        consumer = self.consumer.store.last_redundant_offset()
        pending = self.classic.pending.lowest_offset()
        if share is None:
            return None
        # Without live keys a store answers the committed offset, never below the others.
        return min(o for o in (share, classic, consumer, pending) if o is not None)

    def on_loaded(self, now_ms: int) -> None:
        """The log has been replayed and committed: re-arm soft timers and start answering.

        Members get a fresh session timeout (as Kafka reschedules them on load), so clients that
        keep heartbeating carry on at their epochs. Initializing partitions are retried at once.
        """
        self._loaded = True
        self._store.journaling = True
        self.classic.on_loaded(now_ms)
        self.consumer.on_loaded(now_ms)
        for gid in sorted(self._groups):
            group = self._groups[gid]
            settings = self._group_config(gid)
            for mid in sorted(group.members):
                self._timer.schedule((SESSION, gid, mid), now_ms + settings.session_timeout_ms)
            if group.initializing:
                self._timer.schedule((INIT_RETRY, gid), now_ms)

    def on_unloaded(self) -> None:
        """The partition moved away: drop everything (the next owner replays the log)."""
        self._store.clear()
        self._store.journaling = False
        self.classic.clear()
        self.consumer.clear()
        for _, waiter, _ in self._deliveries:
            self._deliver(waiter, cl.PENDING)
        self._deliveries = []
        self._timer = Timer()
        self._loaded = False

    # ------------------------------------------------------------------ timers

    def on_timer(
        self, now_ms: int, topics: TopicsImage | None = None
    ) -> CoordinatorResult[r.Record, TimerOutcome]:
        """Handle every timer due at ``now_ms``.

        Session expiry fences the member (records as for a leave). Pass the current ``topics``
        to recompute the target assignment at once; without it the remaining members'
        next heartbeat does.
        """
        records: list[r.Record] = []
        txns: dict[str, Txn] = {}
        expired: list[tuple[str, str]] = []
        retried: list[str] = []
        consumer_txns: dict[str, ch.Txn] = {}
        fx = cl.Effects(records)
        downgraded: set[str] = set()
        for key in self._timer.poll(now_ms):
            gid = key[1]
            if key[0].startswith("c-"):
                if self._loaded:
                    self.classic.on_timer(key, now_ms, fx)
                continue
            if key[0].startswith("consumer-"):
                if self._loaded and gid not in downgraded:
                    if self._timer_downgrade(key, now_ms, consumer_txns, topics, fx):
                        downgraded.add(gid)
                        continue
                    fenced = self.consumer.on_timer(key, now_ms, records, consumer_txns, topics)
                    if fenced is not None and not consumer_txns[gid].current.members:
                        self.classic.offsets.arm_retention(gid, now_ms, emptied=True)
                continue
            if gid not in self._groups:
                continue
            txn = txns.setdefault(gid, Txn(gid, self._groups[gid], records))
            if key[0] == SESSION and len(key) == 3:
                mid = key[2]
                if mid in txn.current.members:
                    hb.fence_member(txn, mid, topics, now_ms, gated=self._gated)
                    expired.append((gid, mid))
            elif key[0] == INIT_RETRY and txn.current.initializing:
                group = txn.current
                txn.emit(hb.state_metadata_record(gid, {}, group.initialized, group.deleting))
                retried.append(gid)
        self._queue(fx)
        return CoordinatorResult(
            records=tuple(records), response=TimerOutcome(tuple(expired), tuple(retried))
        )

    def _timer_downgrade(self, key: TimerKey, now_ms: int, txns: dict[str, ch.Txn],
                         topics: TopicsImage | None, fx: cl.Effects) -> bool:
        """A session or rebalance timeout of the last consumer-protocol member of a group of
        classic members downgrades the group instead of fencing the member (Kafka's
        ``consumerGroupFenceMember``)."""
        if len(key) != 3 or key[0] not in (cgs.SESSION, cgs.REBALANCE):
            return False
        gid, mid = key[1], key[2]
        group = txns[gid].current if gid in txns else self.consumer.group(gid)
        member = group.members.get(mid) if group is not None else None
        if group is None or member is None or member.classic is not None:
            return False
        if key[0] == cgs.REBALANCE and member.state != cgr.STATE_UNREVOKED_PARTITIONS:
            return False
        return self.downgrade(group, (mid,), topics, now_ms, fx)

    def downgrade(self, group: ConsumerGroup, leaving: tuple[str, ...],
                  topics: TopicsImage | None, now_ms: int, fx: cl.Effects) -> bool:
        raise NotImplementedError  # ConsumerShardOps

    # ------------------------------------------------------------------ deferred classic answers

    def _queue(self, fx: cl.Effects) -> None:
        """Deferred answers of an op wait for the op's records (see ``deliver``)."""
        if not fx.deliveries:
            return
        threshold = self._store.end_offset + len(fx.records)
        for waiter, response in fx.deliveries:
            self._deliveries.append((threshold, waiter, response))
        if threshold <= self._store.committed_offset:
            self._release_deliveries()

    def _release_deliveries(self) -> None:
        committed = self._store.committed_offset
        due = [d for d in self._deliveries if d[0] <= committed]
        if not due:
            return
        self._deliveries = [d for d in self._deliveries if d[0] > committed]
        for _, waiter, response in due:
            self._deliver(waiter, response)

    # ------------------------------------------------------------------ helpers

    def _group_error(self, group_id: str) -> tuple[ErrorCode, str] | None:
        if not self._loaded:
            return ErrorCode.coordinator_load_in_progress, "Loading."
        if group_id not in self._groups:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found."
        return None


def frozen_partitions(partitions: Mapping[uuid.UUID, Iterable[int]]
                      ) -> dict[uuid.UUID, frozenset[int]]:
    return {tid: frozenset(parts) for tid, parts in partitions.items()}


def initialize_extra(inits: list[ShareStateInitialization]) -> dict[str, object]:
    return {INITIALIZE_EXTRA: tuple(inits)} if inits else {}
