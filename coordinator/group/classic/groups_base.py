"""``ClassicGroupsBase``: the state of the classic groups of one coordinator partition.

``ClassicGroups`` (``groups.py``; the concept is in ``group.py``'s docstring) is this base plus
the rebalance protocol (``rebalance.py``: JoinGroup, SyncGroup, member removal) and the other
ops (heartbeat, leave, timers, offsets). The base holds the groups, their durable store and
pending transactional offsets, the reads, replay, load, and the helpers every op uses.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from coordinator.group.classic import records as cr
from coordinator.group.classic.group import (
    CONSUMER_PROTOCOL_TYPE,
    SESSION_TIMER,
    ClassicDescription,
    ClassicGroup,
    ClassicSettings,
    ClassicState,
    DescribedMember,
    JoinMember,
    Member,
)
from coordinator.group.offsets import (
    EVERY_TOPIC,
    CommittedOffsets,
    DurableStore,
    TimerCancel,
    TimerDeadline,
    TimerSchedule,
    TopicFilter,
)
from coordinator.group.record import Record
from coordinator.group.txn_offsets import PendingOffsets


class ClassicGroupsBase:
    """Classic groups of one coordinator partition: state, reads, replay (see the module doc)."""

    def __init__(self, *, settings: Callable[[str], ClassicSettings], schedule: TimerSchedule,
                 cancel: TimerCancel,
                 subscriptions: Callable[[str], frozenset[str] | None] = lambda _gid: None,
                 deadline: TimerDeadline = lambda _key: None) -> None:
        """``subscriptions(group_id)``: the topics a consumer-protocol group with members
        subscribes to, or None when the id is not such a group (only the offsets of other topics
        may expire). ``deadline(key)``: when timer ``key`` is due, or None."""
        self.groups: dict[str, ClassicGroup] = {}
        # The fold of the partition's classic records (GroupMetadata here, OffsetCommit in
        # ``offsets``), shared with the offsets of every group type.
        self.store = DurableStore()
        # Transactional offsets waiting for their transaction's marker (``txn_offsets.py``).
        self.pending = PendingOffsets()
        self.offsets = CommittedOffsets(self.store, settings=settings, schedule=schedule,
                                        cancel=cancel, expiring=self._expiring,
                                        forget=self._forget, pending=self.pending,
                                        deadline=deadline)
        self._settings = settings
        self._schedule = schedule
        self._cancel = cancel
        self._subscriptions = subscriptions

    # -------------------------------------------------------------- reads

    def group_ids(self) -> set[str]:
        """Every classic group id: live groups and ids holding committed or pending offsets."""
        return set(self.groups) | set(self.store.keys_per_group) | self.pending.groups()

    def has(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.store.keys_per_group \
            or self.pending.has_group(group_id)

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of every classic group, committed offsets included."""
        out = []
        committed = self.store.committed_items()
        ids = set(self.groups) | {k.group_id for k in committed} | self.pending.groups()
        for gid in sorted(ids):
            g = self.groups.get(gid)
            if g is None:
                out.append((gid, ClassicState.EMPTY.value, ""))
            else:
                out.append((gid, g.state.value, g.protocol_type or ""))
        return out

    def describe(self, group_id: str) -> ClassicDescription | None:
        g = self.groups.get(group_id)
        if g is None:
            if self.has(group_id):
                return ClassicDescription(group_id, ClassicState.EMPTY.value, "", "", ())
            return None
        members = tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id,
                                        m.client_host, m.metadata(g.protocol), m.assignment)
                        for m in g.members.values())
        protocol = g.protocol or "" if g.state is not ClassicState.PREPARING else ""
        return ClassicDescription(group_id, g.state.value, g.protocol_type or "", protocol,
                                  members)

    # -------------------------------------------------------------- replay and load

    def replay(self, offset: int, key: cr.ClassicKey, value: cr.ClassicValue | None) -> None:
        self.store.replay(offset, key, value)
        if value is None and isinstance(key, cr.OffsetCommitKey):
            self.pending.tombstone(offset, key)  # as Kafka: pending ones of it go too

    def replay_transactional(self, offset: int, producer_id: int, producer_epoch: int,
                             key: cr.OffsetCommitKey, value: cr.OffsetCommitValue) -> None:
        self.pending.replay(offset, producer_id, producer_epoch, key, value)

    def replay_end_transaction(self, offset: int, producer_id: int, commit: bool) -> None:
        """The producer's marker: on COMMIT its pending offsets become committed, each unless a
        commit appended after it already holds the partition (Kafka keeps the most recent)."""
        txn = self.pending.end(offset, producer_id)
        if txn is None or not commit:
            return
        for key in sorted(txn.offsets, key=lambda k: (k.group_id, k.topic, k.partition)):
            p = txn.offsets[key]
            current = self.store.key_offsets.get(key)
            if current is None or p.record_offset > current:
                self.store.replay(offset, key, p.value, value_offset=p.record_offset)

    def on_loaded(self, now_ms: int) -> None:
        """Rebuild groups from their GroupMetadata values; arm sessions and retention."""
        self.store.journaling = True
        self.pending.journaling = True
        for key, value in self.store.values.items():
            if not isinstance(key, cr.GroupMetadataKey):
                continue
            assert isinstance(value, cr.GroupMetadataValue)
            g = ClassicGroup(key.group_id, protocol_type=value.protocol_type or None,
                             protocol=value.protocol, generation=value.generation,
                             leader=value.leader, state_timestamp=now_ms)
            for mm in value.members:
                g.members[mm.member_id] = Member(
                    mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                    mm.session_timeout, mm.rebalance_timeout, value.protocol_type,
                    ((value.protocol or "", mm.subscription),), mm.assignment)
                self._schedule((SESSION_TIMER, key.group_id, mm.member_id),
                               now_ms + mm.session_timeout)
            g.state = ClassicState.STABLE if g.members else ClassicState.EMPTY
            g.compute_subscribed()
            self.groups[key.group_id] = g
        for gid in sorted(self.group_ids()):
            self.offsets.arm_retention(gid, now_ms)

    def clear(self) -> None:
        self.groups.clear()
        self.store.clear()
        self.store.journaling = False
        self.pending.clear()
        self.pending.journaling = False

    # -------------------------------------------------------------- helpers

    def _forget_if_unused(self, g: ClassicGroup) -> None:
        """Drop an Empty group that holds nothing (no member, no pending member, no record).

        A refused join, or a MEMBER_ID_REQUIRED id never used, would otherwise leave one such
        group per group id a client makes up, for as long as the broker runs. Kafka writes an
        Empty GroupMetadata for them and deletes it at its next offsets-retention check; Shoal
        never keeps them (they hold nothing a client could read back)."""
        if (g.state is ClassicState.EMPTY and not g.members and not g.pending
                and g.group_id not in self.store.keys_per_group):
            self.groups.pop(g.group_id, None)

    def _remove(self, g: ClassicGroup, mid: str) -> None:
        m = g.members.pop(mid, None)
        self._cancel((SESSION_TIMER, g.group_id, mid))
        if m is not None and g.leader == mid:
            g.leader = next(iter(g.members), None)

    def _join_members(self, g: ClassicGroup) -> tuple[JoinMember, ...]:
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(g.protocol))
                     for m in g.members.values())

    def _validate_member(self, g: ClassicGroup, member_id: str,
                         instance_id: str | None) -> ErrorCode | None:
        if instance_id is not None:
            static = g.static_member(instance_id)
            if static is not None and static.member_id != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in g.members:
            return ErrorCode.unknown_member_id
        return None

    def _fits(self, g: ClassicGroup, record: Record) -> bool:
        """Whether a GroupMetadata record is within message.max.bytes."""
        size = len(cr.encode_value(record.value) or b"")
        return size <= self._settings(g.group_id).max_record_bytes

    def _metadata_record(self, g: ClassicGroup, now_ms: int) -> Record:
        value = cr.GroupMetadataValue(
            g.protocol_type or "", g.generation, g.protocol, g.leader, now_ms,
            tuple(cr.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms, m.session_timeout_ms,
                                    m.metadata(g.protocol), m.assignment)
                  for m in g.members.values()))
        return Record(cr.GroupMetadataKey(g.group_id), value)

    def _expiring(self, group_id: str) -> TopicFilter | None:
        """Which topics of the id's offsets may expire (Kafka's offset expiration condition and
        ``isSubscribedToTopic``): every topic with no group or an Empty one; the unsubscribed
        topics of a consumer-protocol group with members or of a Stable classic ``consumer``
        group whose subscription is known; none otherwise (a rebalancing classic group)."""
        subscribed = self._subscriptions(group_id)
        if subscribed is not None:
            return lambda topic: topic not in subscribed
        g = self.groups.get(group_id)
        if g is None or g.state is ClassicState.EMPTY:
            return EVERY_TOPIC
        if (g.state is ClassicState.STABLE and g.protocol_type == CONSUMER_PROTOCOL_TYPE
                and g.subscribed is not None):
            known = g.subscribed
            return lambda topic: topic not in known
        return None

    def _forget(self, group_id: str) -> None:
        """The id's last offset expired: its (Empty) group goes with it."""
        self.groups.pop(group_id, None)
