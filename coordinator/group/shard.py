"""``GroupCoordinatorShard``: the share, classic and consumer groups of one ``__consumer_offsets``
partition.

Consumer-protocol (KIP-848) groups (``consumer_groups.py``, records in ``consumer_records.py``)
live in ``self.consumer``: ``replay`` routes their records there, ``commit``/``revert`` move its
store, timers with keys starting ``"consumer-"`` are theirs, their committed offsets are kept by
``self.classic.offsets`` (``offsets.py``, OffsetCommit records) and validated by member epoch. A
consumer heartbeat on a share group's id (or a classic group's with members) answers
GROUP_ID_NOT_FOUND, a share heartbeat on a consumer group's id too, JoinGroup
INCONSISTENT_GROUP_PROTOCOL; an empty group of one protocol may be taken over by the other (Kafka's
online upgrade/downgrade of empty groups).

Classic consumer groups (``classic.py``) and committed offsets (``offsets.py``; records in
``classic_records.py``: Kafka's GroupMetadata and OffsetCommit formats) live in ``self.classic``
and ``self.classic.offsets`` beside the share groups:
``replay`` routes their records there, ``commit``/``revert`` move both stores, timers with keys
starting ``"c-"`` are theirs, and ``list_groups`` lists both kinds. One group id has one type:
classic ops on a share group's id answer GROUP_ID_NOT_FOUND (JoinGroup:
INCONSISTENT_GROUP_PROTOCOL), a share heartbeat with a classic group's id GROUP_ID_NOT_FOUND.
Deferred classic answers (JoinGroup, a follower's SyncGroup) go to ``deliver`` once the records
of the op that produced them are committed; a revert or unload delivers ``classic.PENDING``,
which the caller turns into an error.

Transactional offsets (TxnOffsetCommit, ``txn_offsets.py``): ``txn_commit_offsets`` validates
like Kafka's ``validateTransactionalOffsetCommit`` and returns OffsetCommit records that the
runtime appends as a transactional batch of the producer (``CoordinatorRuntime.
write_transactional``); they replay through ``replay_transactional`` into
``self.classic.pending`` and wait for the producer's marker, replayed by
``replay_end_transaction`` (the shard is the runtime's ``TransactionalShard``).

Concept (STYLE.md 1.3-1.5, after Kafka's ``GroupCoordinatorShard``): the shard holds every share
group whose id maps to its partition. Write ops (heartbeat, topic changes, timers, share-state
initialisation, delete) validate against the latest replayed state and return
``CoordinatorResult(records, response)`` without touching group state; ``replay(offset, key,
value)`` is the only mutator. It is the runtime's ``TimedShard`` (``coordinator/runtime/shard.py``;
records go through ``serde.GroupRecordSerde``):

- the runtime replays an op's records at their log offsets right after the op runs (so the next
  op sees them), then ``commit(offset)`` once they are durable, or ``revert(offset)`` if the
  append or fsync failed (``store.GroupStore`` keeps the undo log); responses go out after commit;
- loading replays the partition's log, commits its end and calls ``on_loaded(now_ms)``, which
  re-arms the soft timers; ``on_unloaded`` drops everything;
- timers: the runtime arms ``next_deadline()`` and runs ``on_timer(now_ms)`` as a write op
  (without a topics image: the target is then recomputed by the next heartbeat);
- ``last_redundant_offset`` lets the runtime prune the log below the oldest record a reload needs.

Reads that answer clients (``describe``, ``list_groups``, ``committed_group``) use the committed
view; ``groups``/``group`` are the latest replayed state (what ops see).

Driving it from the shell (``coordinator/group/service.py``):
- ``initializations(result)`` lists share-partition state to initialize (InitializeShareGroupState,
  StartOffset -1, StateEpoch = the given epoch), to send once the op's records are committed. When
  the persister answers, run ``mark_initialized`` or ``mark_initialization_failed`` (write ops).
- topic metadata: on create/delete/partition growth run ``on_topics_changed(topics, now_ms)``.
- ``on_member_removed(group id, member id)`` (constructor) is called from ``commit`` for each
  member whose removal (leave or session expiry) just became durable.
- ``replay_record(record)`` replays at the next offset and commits at once (callers without a log).

Soft state (not in records, rebuilt by ``on_loaded``): the timer. Timer keys are tuples, not
``"session:<group>:<member>"`` strings, because group and member ids may contain ``:``:
``("session", group_id, member_id)`` and ``("init-retry", group_id)``. Scheduling a timer from a
write op is the one permitted side effect (as in Kafka); expiry handlers re-check the committed
state, so a timer left behind by a failed append is harmless.

Two-phase share-partition initialisation (reference section 5): heartbeats and topic changes mark
subscribed partitions that are neither initialized nor initializing as Initializing (record 15)
and hand them out via ``initializations(result)``; only Initialized partitions are assignable.
``mark_initialized`` moves them to Initialized, bumps the group epoch and recomputes the target,
so members receive them on their next heartbeat. ``mark_initialization_failed`` drops them from
Initializing so the next heartbeat retries. An ``("init-retry", group)`` timer
(``initialize_retry_interval_ms``, Kafka's group.share.initialize.retry.interval.ms, 30 s) clears
Initializing entries whose answer never came (e.g. the shell crashed), so they are retried too.
Re-initializing a partition that never became Initialized is safe: it was never assigned, so
nobody consumed from it. Initialized partitions are durable (record 15) and never initialized
again while the group exists, so their consumption progress survives restarts. After a load,
Initializing entries are retried at once: the answers to their requests died with the previous
process. With ``require_share_state_initialization=False`` (no persister wired
yet) every subscribed partition is assignable and record 15 is never written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from kio.schema.errors import ErrorCode

from coordinator.group import offsets as off
from coordinator.group.classic import group as cl
from coordinator.group.classic import records as cr
from coordinator.group.consumer import groups as cgs
from coordinator.group.consumer import heartbeat as ch
from coordinator.group.consumer import records as cgr
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.groups import ConsumerGroups
from coordinator.group.share import heartbeat as hb
from coordinator.group.share import records as r
from coordinator.group.share.assignor import TopicsImage
from coordinator.group.share.group import GroupState, PartitionSet, ShareGroup
from coordinator.group.share.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareGroupSettings,
    ShareStateDeletion,
    ShareStateInitialization,
    Txn,
)
from coordinator.group.share.store import GroupStore
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


class GroupCoordinatorShard:
    """All groups of one coordinator partition (sans-IO; see the module docstring)."""

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
            classic_config: classic-group settings for a group id (``classic.py``).
            consumer_config: consumer-group settings for a group id (``consumer_groups.py``).
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
        self.classic = cl.ClassicGroups(settings=classic_config, schedule=self._schedule,
                                        cancel=self._cancel,
                                        busy=lambda gid: self.consumer.has_members(gid))
        self.classic.store.journaling = not loading
        # Consumer-protocol (KIP-848) groups; their offsets are kept by ``classic.offsets``.
        self._consumer_config = consumer_config
        self._on_consumer_member_removed = on_consumer_member_removed
        self.consumer = ConsumerGroups(settings=consumer_config, schedule=self._schedule,
                                       journaling=not loading)

    def _schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self._timer.schedule(key, deadline_ms)  # through self: on_unloaded replaces the timer

    def _cancel(self, key: TimerKey) -> None:
        self._timer.cancel(key)

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
        return self._store.committed_group(group_id)

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

    def describe(self, group_id: str) -> DescribeResult:
        """ShareGroupDescribe for one group id (GROUP_ID_NOT_FOUND if absent or not share)."""
        if not self._loaded:
            return DescribeResult(ErrorCode.coordinator_load_in_progress)
        group = self._store.committed_group(group_id)
        if group is None and (self.classic.has(group_id) or self.consumer.has(group_id)):
            return DescribeResult(ErrorCode.group_id_not_found,
                                  error_message=f"Group {group_id} is not a share group.")
        if group is None:
            return DescribeResult(
                ErrorCode.group_id_not_found, error_message=f"Group {group_id} not found."
            )
        return DescribeResult(ErrorCode.none, group)

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

    def partitions_needing_initialization(
        self, group_id: str, topics: TopicsImage
    ) -> dict[uuid.UUID, frozenset[int]]:
        """Subscribed partitions of the group that are neither initialized nor initializing."""
        group = self._groups.get(group_id)
        return hb.partitions_needing_initialization(group, topics) if group else {}

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
            self.classic.replay(offset, key, value)  # type: ignore[arg-type]
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
                                          value)  # type: ignore[arg-type]
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

    # ------------------------------------------------------------------ heartbeat

    def share_group_heartbeat(
        self, req: HeartbeatRequest, topics: TopicsImage, now_ms: int
    ) -> CoordinatorResult[r.Record, HeartbeatResponse]:
        """Handle one ShareGroupHeartbeat (see ``heartbeat.py`` for the rules).

        Re-arms the member's session timer on success (cancels it on leave).
        """
        if not self._loaded:
            return CoordinatorResult(
                response=hb.error_response(ErrorCode.coordinator_load_in_progress, "Loading.")
            )
        settings = self._group_config(req.group_id)
        outcome = hb.share_group_heartbeat(
            self._groups.get(req.group_id),
            req,
            topics,
            now_ms,
            settings,
            gated=self._gated,
            is_non_share_group=bool(req.group_id) and (
                self._is_non_share_group(req.group_id) or self.classic.has(req.group_id)
                or self.consumer.has(req.group_id)),
        )
        response = outcome.response
        if response.error_code == ErrorCode.none:
            key: TimerKey = (SESSION, req.group_id, req.member_id)
            if response.member_epoch == hb.LEAVE_GROUP_MEMBER_EPOCH:
                self._timer.cancel(key)
            else:
                self._timer.schedule(key, now_ms + settings.session_timeout_ms)
        extra: dict[str, object] = {}
        if outcome.initialization is not None:
            extra[INITIALIZE_EXTRA] = (outcome.initialization,)
            self._timer.schedule((INIT_RETRY, req.group_id), now_ms + self._init_retry_ms)
        return CoordinatorResult(records=outcome.records, response=response, extra=extra)

    # ------------------------------------------------------------------ topic metadata

    def on_topics_changed(
        self, topics: TopicsImage, now_ms: int
    ) -> CoordinatorResult[r.Record, None]:
        """Topic created/deleted/grown: bump the epoch of every group whose subscribed-topic
        metadata hash changed and compute its new target; plan initialisation of new
        partitions. Members receive the change on their next heartbeat."""
        records: list[r.Record] = []
        inits: list[ShareStateInitialization] = []
        deletes: list[ShareStateDeletion] = []
        for gid in sorted(self._groups):
            txn = Txn(gid, self._groups[gid], records)
            if self._gated:
                deletion = hb.prune_state_metadata(txn, topics)
                if deletion is not None:
                    deletes.append(deletion)
            hb.bump_group_epoch(txn, topics, force=False)
            hb.maybe_compute_target(txn, topics, now_ms, gated=self._gated)
            init = hb.plan_initialization(txn, topics) if self._gated else None
            if init is not None:
                inits.append(init)
                self._timer.schedule((INIT_RETRY, gid), now_ms + self._init_retry_ms)
        if self._loaded:
            self.consumer.on_topics_changed(topics, now_ms, records)
        extra = _init_extra(inits)
        if deletes:
            extra[DELETE_EXTRA] = tuple(deletes)
        return CoordinatorResult(records=tuple(records), extra=extra)

    def mark_deleted(
        self, group_id: str, topic_ids: Iterable[uuid.UUID]
    ) -> CoordinatorResult[r.Record, None]:
        """The share state of these deleted topics is gone: drop them from Deleting."""
        group = self._groups.get(group_id)
        if group is None:
            return CoordinatorResult()
        deleting = {t: n for t, n in group.deleting.items() if t not in set(topic_ids)}
        if deleting == dict(group.deleting):
            return CoordinatorResult()
        return CoordinatorResult(records=(hb.state_metadata_record(
            group_id, group.initializing, group.initialized, deleting),))

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
        fx = cl.Effects(records)  # type: ignore[arg-type]
        for key in self._timer.poll(now_ms):
            gid = key[1]
            if key[0].startswith("c-"):
                if self._loaded:
                    self.classic.on_timer(key, now_ms, fx)
                continue
            if key[0].startswith("consumer-"):
                if self._loaded:
                    fenced = self.consumer.on_timer(key, now_ms, records, consumer_txns, topics)
                    if fenced is not None and not consumer_txns[gid].current.members:
                        self.classic.offsets.arm_retention(gid, now_ms)
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

    # ------------------------------------------------------------------ initialisation

    def mark_initializing(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Iterable[int]],
        topics: TopicsImage,
        now_ms: int,
    ) -> CoordinatorResult[r.Record, InitializeResponse]:
        """Phase 1 by hand: record ``partitions`` as Initializing and return the request.

        Heartbeats and ``on_topics_changed`` already do this for subscribed partitions; this
        op is for explicit (re)initialisation. Partitions of unknown topics are ignored.
        """
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=InitializeResponse(*error))
        txn = Txn(group_id, self._groups[group_id], [])
        init = hb.mark_initializing(txn, _frozen(partitions), topics)
        if init is not None:
            self._timer.schedule((INIT_RETRY, group_id), now_ms + self._init_retry_ms)
        return CoordinatorResult(
            records=tuple(txn.records),
            response=InitializeResponse(ErrorCode.none, initialization=init),
            extra=_init_extra([init] if init else []),
        )

    def mark_initialized(
        self,
        group_id: str,
        partitions: Mapping[uuid.UUID, Iterable[int]],
        topics: TopicsImage,
        now_ms: int,
    ) -> CoordinatorResult[r.Record, ErrorCode]:
        """Phase 2 success: the partitions' share state exists; make them assignable.

        Moves them from Initializing to Initialized (record 15), bumps the group epoch and
        recomputes the target assignment. Partitions of topics gone from ``topics`` are ignored.
        """
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=error[0])
        group = self._groups[group_id]
        ids = topics.ids()
        initializing = dict(group.initializing)
        initialized = dict(group.initialized)
        for tid, parts in _frozen(partitions).items():
            info = ids.get(tid)
            if info is None:
                continue
            parts = frozenset(p for p in parts if 0 <= p < info.num_partitions)
            busy = initializing.pop(tid, None)
            if busy is not None and busy.partitions - parts:
                initializing[tid] = PartitionSet(info.name, busy.partitions - parts)
            done = initialized.get(tid)
            merged = parts | (done.partitions if done else frozenset())
            if merged:
                initialized[tid] = PartitionSet(info.name, merged)
        if not initializing:
            self._timer.cancel((INIT_RETRY, group_id))  # nothing left to retry
        if initializing == dict(group.initializing) and initialized == dict(group.initialized):
            return CoordinatorResult(response=ErrorCode.none)
        txn = Txn(group_id, group, [])
        txn.emit(hb.state_metadata_record(group_id, initializing, initialized, group.deleting))
        if initialized != dict(group.initialized):
            # The assignable set grew: a new group epoch and target (reference section 5 step 3).
            hb.bump_group_epoch(txn, topics, force=True)
            hb.maybe_compute_target(txn, topics, now_ms, gated=self._gated)
        return CoordinatorResult(records=tuple(txn.records), response=ErrorCode.none)

    def mark_initialization_failed(
        self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]]
    ) -> CoordinatorResult[r.Record, ErrorCode]:
        """Phase 2 failure: drop the partitions from Initializing; a later heartbeat retries."""
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=error[0])
        group = self._groups[group_id]
        initializing = dict(group.initializing)
        for tid, parts in _frozen(partitions).items():
            busy = initializing.pop(tid, None)
            if busy is not None and busy.partitions - parts:
                initializing[tid] = PartitionSet(busy.topic_name, busy.partitions - parts)
        if not initializing:
            self._timer.cancel((INIT_RETRY, group_id))  # the next heartbeat re-plans
        if initializing == dict(group.initializing):
            return CoordinatorResult(response=ErrorCode.none)
        record = hb.state_metadata_record(group_id, initializing, group.initialized, group.deleting)
        return CoordinatorResult(records=(record,), response=ErrorCode.none)

    # ------------------------------------------------------------------ delete

    def delete_group(self, group_id: str) -> CoordinatorResult[r.Record, DeleteGroupResponse]:
        """DeleteGroups for a share group: only an Empty group (else NON_EMPTY_GROUP).

        Tombstones every remaining record of the group, group metadata last (as Kafka orders
        them). The response lists the initialized share-partitions whose durable state the
        caller should delete through the persister.
        """
        if self._loaded and self.consumer.has(group_id):
            code, message, recs = self.consumer.delete_group(group_id)
            if code == ErrorCode.none and self.classic.pending.has_group(group_id):
                code, message = ErrorCode.non_empty_group, (
                    f"Consumer group {group_id} has offsets of an ongoing transaction.")
            if code != ErrorCode.none:
                return CoordinatorResult(response=DeleteGroupResponse(code, message))
            fx = cl.Effects()
            self.classic.delete_group(group_id, fx)  # its committed offsets
            return CoordinatorResult(records=(*fx.records, *recs),
                                     response=DeleteGroupResponse(ErrorCode.none))
        if self._loaded and group_id not in self._groups and self.classic.has(group_id):
            fx = cl.Effects()
            code = self.classic.delete_group(group_id, fx)
            message = None if code == ErrorCode.none else f"Group {group_id} is not empty."
            return CoordinatorResult(records=tuple(fx.records),
                                     response=DeleteGroupResponse(code, message))
        error = self._group_error(group_id)
        if error is not None:
            return CoordinatorResult(response=DeleteGroupResponse(*error))
        group = self._groups[group_id]
        if group.members:
            return CoordinatorResult(
                response=DeleteGroupResponse(
                    ErrorCode.non_empty_group, f"Share group {group_id} is not empty."
                )
            )
        records = [
            r.new_target_assignment_member_tombstone(group_id, m)
            for m in sorted(group.target_assignment)
        ]
        records.append(r.new_target_assignment_metadata_tombstone(group_id))
        records.append(r.new_state_partition_metadata_tombstone(group_id))
        records.append(r.new_share_group_metadata_tombstone(group_id))
        self._timer.cancel((INIT_RETRY, group_id))
        return CoordinatorResult(
            records=tuple(records),
            response=DeleteGroupResponse(
                ErrorCode.none, share_state_to_delete=group.initialized_partitions()
            ),
        )

    # ------------------------------------------------------------------ classic groups

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

    def _classic_op(self, group_id: str, fn: Callable[[cl.Effects], Any],
                    refused: Callable[[ErrorCode], Any], *,
                    share_error: ErrorCode = ErrorCode.group_id_not_found,
                    consumer_error: ErrorCode = ErrorCode.unknown_member_id,
                    replace_empty_consumer: bool = False,
                    ) -> CoordinatorResult[r.Record, Any]:
        if not self._loaded:
            return CoordinatorResult(response=refused(ErrorCode.coordinator_load_in_progress))
        if group_id in self._groups:
            return CoordinatorResult(response=refused(share_error))
        fx = cl.Effects()
        if self.consumer.has(group_id):
            if not replace_empty_consumer or self.consumer.has_members(group_id):
                return CoordinatorResult(response=refused(consumer_error))
            # As Kafka: a classic member may take over an empty consumer group's id (its
            # committed offsets stay); the consumer group's records are tombstoned first.
            fx.records.extend(self.consumer.delete_group(group_id)[2])
        response = fn(fx)
        self._queue(fx)
        return CoordinatorResult(records=tuple(fx.records), response=response)

    def classic_join(self, req: cl.JoinRequest, waiter: int,
                     now_ms: int) -> CoordinatorResult[r.Record, Any]:
        """JoinGroup: a ``JoinResponse`` or ``classic.PENDING`` (answered via ``deliver``). A
        share group's id, or a consumer group's with members, gets INCONSISTENT_GROUP_PROTOCOL;
        an empty consumer group is replaced by the classic group."""
        return self._classic_op(
            req.group_id, lambda fx: self.classic.join(req, waiter, now_ms, fx),
            lambda e: cl.JoinResponse(e, member_id=(
                "" if e == ErrorCode.inconsistent_group_protocol else req.member_id)),
            share_error=ErrorCode.inconsistent_group_protocol,
            consumer_error=ErrorCode.inconsistent_group_protocol, replace_empty_consumer=True)

    def classic_sync(self, req: cl.SyncRequest, waiter: int,
                     now_ms: int) -> CoordinatorResult[r.Record, Any]:
        """SyncGroup: a ``SyncResponse`` or ``classic.PENDING``. As Heartbeat, LeaveGroup and
        OffsetCommit, a share group's id gets GROUP_ID_NOT_FOUND (Kafka: "not a classic
        group")."""
        return self._classic_op(
            req.group_id, lambda fx: self.classic.sync(req, waiter, now_ms, fx),
            cl.SyncResponse)

    def classic_heartbeat(self, group_id: str, member_id: str, generation: int,
                          instance_id: str | None,
                          now_ms: int) -> CoordinatorResult[r.Record, ErrorCode]:
        return self._classic_op(
            group_id, lambda _fx: self.classic.heartbeat(group_id, member_id, generation,
                                                         instance_id, now_ms),
            lambda e: e)

    def classic_leave(self, group_id: str, members: tuple[cl.LeaveMember, ...],
                      now_ms: int) -> CoordinatorResult[r.Record, cl.LeaveResponse]:
        return self._classic_op(
            group_id, lambda fx: self.classic.leave(group_id, members, now_ms, fx),
            lambda e: cl.LeaveResponse(e, tuple((m, e) for m in members)))

    def commit_offsets(self, group_id: str, member_id: str, generation: int,
                       instance_id: str | None, parts: tuple[off.OffsetCommitPartition, ...],
                       now_ms: int, api_version: int = 9
                       ) -> CoordinatorResult[r.Record, off.OffsetCommitResponse]:
        """OffsetCommit for a classic, consumer-protocol or standalone group; a share group's id
        gets GROUP_ID_NOT_FOUND. A consumer group's member is validated by member id and epoch
        (``generation`` is the member epoch: STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID)."""
        if self._loaded and group_id not in self._groups and self.consumer.has(group_id):
            problem = self.consumer.validate_commit(group_id, member_id, generation, api_version)
            if problem is not None:
                return CoordinatorResult(response=off.OffsetCommitResponse(
                    problem[0], tuple((p.topic, p.partition, problem[0]) for p in parts)))
            fx = cl.Effects()
            res = self.classic.offsets.write_offsets(group_id, parts, now_ms, fx.records)
            return CoordinatorResult(records=tuple(fx.records), response=res)
        return self._classic_op(
            group_id, lambda fx: self.classic.commit_offsets(
                group_id, member_id, generation, instance_id, parts, now_ms, fx),
            lambda e: off.OffsetCommitResponse(e, tuple((p.topic, p.partition, e)
                                                       for p in parts)))

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, generation: int, instance_id: str | None,
                           parts: tuple[off.OffsetCommitPartition, ...], now_ms: int
                           ) -> CoordinatorResult[r.Record, off.OffsetCommitResponse]:
        """TxnOffsetCommit: OffsetCommit records for the runtime to append as a transactional
        batch of ``producer_id`` (pending until its marker). Refusals, for every partition:
        COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID, GROUP_ID_NOT_FOUND (a share group's id),
        INVALID_PRODUCER_EPOCH (an epoch older than the producer's pending transaction here),
        and the member checks of ``classic.validate_txn_commit`` /
        ``consumer_groups.validate_txn_commit``. Metadata over offset.metadata.max.bytes gets
        OFFSET_METADATA_TOO_LARGE for its partition."""
        def refused(code: ErrorCode) -> CoordinatorResult[r.Record, off.OffsetCommitResponse]:
            return CoordinatorResult(response=off.OffsetCommitResponse(
                code, tuple((p.topic, p.partition, code) for p in parts)))

        if not self._loaded:
            return refused(ErrorCode.coordinator_load_in_progress)
        if not group_id or not cr.fits(group_id):
            return refused(ErrorCode.invalid_group_id)
        if group_id in self._groups:
            return refused(ErrorCode.group_id_not_found)
        epoch = self.classic.pending.epoch(producer_id)
        if epoch is not None and producer_epoch < epoch:
            return refused(ErrorCode.invalid_producer_epoch)
        if self.consumer.has(group_id):
            error = self.consumer.validate_txn_commit(group_id, member_id, generation)
        else:
            error = self.classic.validate_txn_commit(group_id, member_id, generation,
                                                     instance_id)
        if error is not None:
            return refused(error)
        records: list[r.Record] = []
        res = self.classic.offsets.write_offsets(group_id, parts, now_ms, records)
        return CoordinatorResult(records=tuple(records), response=res)

    def delete_offsets(self, group_id: str, parts: tuple[tuple[str, int], ...]
                       ) -> CoordinatorResult[r.Record, Any]:
        if self._loaded and self.consumer.has(group_id):
            codes, recs = self.consumer.delete_offsets(
                group_id, parts, lambda key: key in self.classic.store.values
                or self.classic.pending.has(key))
            return CoordinatorResult(records=recs, response=(ErrorCode.none, codes))
        return self._classic_op(
            group_id, lambda fx: self.classic.delete_offsets(group_id, parts, fx),
            lambda e: (e, ()))

    def fetch_offsets(self, group_id: str, topics: Any, member_id: str | None = None,
                      member_epoch: int = -1,
                      require_stable: bool = False) -> off.OffsetFetchResponse:
        """OffsetFetch (committed view). Unknown groups have no offsets (-1). For a consumer
        group, a member id or epoch >= 0 (v9+) must name a member at that epoch
        (UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH). ``require_stable``: partitions with pending
        transactional offsets answer UNSTABLE_OFFSET_COMMIT."""
        if not self._loaded:
            return off.OffsetFetchResponse(ErrorCode.coordinator_load_in_progress)
        if self._store.committed_group(group_id) is not None:
            return off.OffsetFetchResponse(ErrorCode.group_id_not_found)
        if self.consumer.committed_group(group_id) is not None:
            error = self.consumer.validate_fetch(group_id, member_id, member_epoch)
            if error is not None:
                return off.OffsetFetchResponse(error)
        return self.classic.offsets.fetch_offsets(group_id, topics, require_stable)

    # ------------------------------------------------------------------ consumer groups

    def consumer_group_heartbeat(
        self, req: ch.ConsumerHeartbeatRequest, topics: TopicsImage, now_ms: int, *,
        topics_version: int = 0, allowed: ch.TopicFilter | None = None,
    ) -> CoordinatorResult[r.Record, ch.ConsumerHeartbeatResponse]:
        """ConsumerGroupHeartbeat (see ``consumer_heartbeat.py``). A share group's id, or a
        classic group's with members, gets GROUP_ID_NOT_FOUND; an empty classic group is
        replaced by the consumer group on a join (its GroupMetadata is tombstoned; committed
        offsets stay), as Kafka does."""
        if not self._loaded:
            return CoordinatorResult(response=ch.error_response(
                ErrorCode.coordinator_load_in_progress, "Loading."))
        gid = req.group_id
        records: list[r.Record] = []
        classic = self.classic.groups.get(gid)
        other = gid in self._groups
        if classic is not None and not self.consumer.has(gid):
            if classic.members or classic.state is not cl.ClassicState.EMPTY:
                other = True
            elif req.member_epoch == ch.JOIN_GROUP_MEMBER_EPOCH:
                key = cr.GroupMetadataKey(gid)
                if key in self.classic.store.values:
                    records.append(r.Record(key, None))  # type: ignore[arg-type]
        res = self.consumer.heartbeat(
            req, topics, now_ms, other_type=other, topics_version=topics_version,
            allowed=allowed if allowed is not None else (lambda names: names))
        if res.response.error_code != ErrorCode.none:
            return CoordinatorResult(response=res.response)
        if records:
            self.classic.groups.pop(gid, None)  # soft state of the replaced empty classic group
        if res.emptied:
            self.classic.offsets.arm_retention(gid, now_ms)
        return CoordinatorResult(records=(*records, *res.records), response=res.response)

    def describe_consumer(self, group_id: str) -> ConsumerDescribeResult:
        """ConsumerGroupDescribe of one id (committed view): GROUP_ID_NOT_FOUND for unknown ids
        and for share or classic groups ("is not a consumer group"), as Kafka."""
        if not self._loaded:
            return ConsumerDescribeResult(ErrorCode.coordinator_load_in_progress)
        group = self.consumer.committed_group(group_id)
        if group is None:
            other = self._store.committed_group(group_id) is not None or \
                self.classic.has(group_id)
            message = (f"Group {group_id} is not a consumer group." if other
                       else f"Group {group_id} not found.")
            return ConsumerDescribeResult(ErrorCode.group_id_not_found, error_message=message)
        return ConsumerDescribeResult(ErrorCode.none, group, assignor_name=ch.preferred_assignor(
            group, self._consumer_config(group_id)))



    def describe_classic(self, group_id: str) -> cl.ClassicDescription | None:
        return self.classic.describe(group_id) if self._loaded else None

    # ------------------------------------------------------------------ helpers

    def _group_error(self, group_id: str) -> tuple[ErrorCode, str] | None:
        if not self._loaded:
            return ErrorCode.coordinator_load_in_progress, "Loading."
        if group_id not in self._groups:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found."
        return None


def _frozen(partitions: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {tid: frozenset(parts) for tid, parts in partitions.items()}


def _init_extra(inits: list[ShareStateInitialization]) -> dict[str, object]:
    return {INITIALIZE_EXTRA: tuple(inits)} if inits else {}
