"""``ConsumerGroups``: the consumer-protocol (KIP-848) groups of one ``__consumer_offsets``
partition.

Concept: lives inside ``GroupCoordinatorShard`` beside the share groups and
``classic/group.py``, like them a fold of records (``consumer/records.py``) kept in a ``GroupStore`` (undo log, committed
view, pruning offsets). Write ops return records and never mutate the store; the shard's
``replay`` routes consumer records here. Committed offsets of consumer groups are OffsetCommit
records kept by ``offsets.py`` (one offsets store per partition); this module validates who may
commit and fetch them (Kafka's ``ConsumerGroup.validateOffsetCommit``/``validateOffsetFetch``).

Soft state (rebuilt by ``on_loaded``): timers, keyed ``("consumer-session", group, member)`` (a
member that does not heartbeat within the session timeout is fenced; a static member that left
with epoch -2 is removed when it does not return within it; a classic member's session timeout
is its own), ``("consumer-rebalance", group, member)`` (a member that does not confirm a
revocation within its rebalance timeout is fenced), and for members using the classic protocol
(``classic_members.py``) ``("consumer-join", ...)`` and ``("consumer-sync", ...)``: a member
told to rejoin that does not, or that joined and does not sync, within its rebalance timeout is
fenced. Handlers re-check the state, so a timer left behind by a reverted op is harmless.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group.classic import records as cr
from coordinator.group.classic.group import (
    JoinRequest,
    JoinResponse,
    LeaveMember,
    LeaveResponse,
    SyncRequest,
    SyncResponse,
)
from coordinator.group.consumer import classic_members as cm
from coordinator.group.consumer import heartbeat as ch
from coordinator.group.consumer import records as c
from coordinator.group.consumer.group import (
    ConsumerGroup,
    ConsumerGroupState,
    apply_record,
)
from coordinator.group.record import Record
from coordinator.group.share.store import GroupStore
from coordinator.group.topics_image import TopicsImage

SESSION = "consumer-session"
REBALANCE = "consumer-rebalance"
GROUP_TYPE = "consumer"  # ListGroups GroupType
PROTOCOL_TYPE = "consumer"  # ListGroups ProtocolType

Schedule = Callable[[tuple[str, ...], int], None]
Cancel = Callable[[tuple[str, ...]], None]
Armed = Callable[[tuple[str, ...]], bool]


def _default_settings(_group_id: str) -> ch.ConsumerGroupSettings:
    return ch.ConsumerGroupSettings()


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    records: tuple[Record, ...]
    response: ch.ConsumerHeartbeatResponse
    emptied: bool = False  # the group lost its last member (offsets retention starts)


class ConsumerGroups:
    """Consumer groups of one coordinator partition (see the module docstring)."""

    def __init__(self, *, settings: Callable[[str], ch.ConsumerGroupSettings] = _default_settings,
                 schedule: Schedule, journaling: bool = True,
                 cancel: Cancel = lambda _key: None,
                 armed: Armed = lambda _key: False) -> None:
        self.store = GroupStore(journaling=journaling, apply=apply_record,
                                member_key=c.ConsumerGroupMemberMetadataKey)
        self._settings = settings
        self._schedule = schedule
        self._cancel = cancel
        self._armed = armed

    # -------------------------------------------------------------- reads

    def has(self, group_id: str) -> bool:
        return group_id in self.store.groups

    def group(self, group_id: str) -> ConsumerGroup | None:
        g: ConsumerGroup | None = self.store.groups.get(group_id)
        return g

    def committed_group(self, group_id: str) -> ConsumerGroup | None:
        g: ConsumerGroup | None = self.store.committed_group(group_id)
        return g

    def has_members(self, group_id: str) -> bool:
        g = self.group(group_id)
        return g is not None and bool(g.members)

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every committed consumer group."""
        groups = self.store.committed_groups()
        return [(gid, groups[gid].state.value) for gid in sorted(groups)]

    # -------------------------------------------------------------- ops

    def heartbeat(self, req: ch.ConsumerHeartbeatRequest, topics: TopicsImage, now_ms: int, *,
                  other_type: bool, topics_version: int,
                  allowed: ch.TopicFilter,
                  upgraded: ConsumerGroup | None = None) -> HeartbeatResult:
        """``upgraded``: the group a classic group is being converted into by this op (its
        records precede the heartbeat's); its members get their classic session timeouts."""
        settings = self._settings(req.group_id)
        before = upgraded if upgraded is not None else self.group(req.group_id)
        out = ch.consumer_group_heartbeat(
            before, req, topics, now_ms, settings, other_type=other_type,
            topics_version=topics_version, allowed=allowed)
        resp = out.response
        if resp.error_code != ErrorCode.none or resp.member_id is None:
            return HeartbeatResult(out.records, resp)
        gid, mid = req.group_id, resp.member_id
        # Timers are never cancelled here: the op's records may still be reverted, and the
        # handlers re-check the member (gone, or no longer revoking: nothing to do).
        if resp.member_epoch != ch.LEAVE_GROUP_MEMBER_EPOCH:
            # Also for a static member that left with -2: it is removed unless it returns.
            self._schedule((SESSION, gid, mid), now_ms + settings.session_timeout_ms)
        if out.revoking is not None:
            who, timeout = out.revoking
            if timeout is not None:  # entering (or renewing) a revocation: a fresh deadline
                self._schedule((REBALANCE, gid, who), now_ms + timeout)
        if upgraded is not None:
            for m in upgraded.members.values():
                if m.classic is not None:
                    self._schedule((SESSION, gid, m.member_id),
                                   now_ms + m.classic.session_timeout_ms)
        emptied = _emptied(before, out.records)
        return HeartbeatResult(out.records, resp, emptied)

    # -------------------------------------------------------------- classic members

    def _apply(self, timers: cm.Timers) -> None:
        for key in timers.cancel:
            self._cancel(key)
        for key, deadline in timers.schedule:
            self._schedule(key, deadline)
        for key, deadline in timers.schedule_if_absent:
            if not self._armed(key):
                self._schedule(key, deadline)

    def classic_join(self, req: JoinRequest, topics: TopicsImage, now_ms: int
                     ) -> tuple[tuple[Record, ...], JoinResponse]:
        """JoinGroup of a classic member to a consumer group with members
        (``classic_members.py``)."""
        group = self.group(req.group_id)
        assert group is not None
        out = cm.join(group, req, topics, now_ms, self._settings(req.group_id))
        self._apply(out.timers)
        assert isinstance(out.response, JoinResponse)
        return out.records, out.response

    def classic_sync(self, req: SyncRequest, topics: TopicsImage, now_ms: int) -> SyncResponse:
        group = self.group(req.group_id)
        assert group is not None
        out = cm.sync(group, req, topics, now_ms)
        self._apply(out.timers)
        assert isinstance(out.response, SyncResponse)
        return out.response

    def classic_heartbeat(self, group_id: str, member_id: str, generation: int,
                          instance_id: str | None, now_ms: int) -> ErrorCode:
        group = self.group(group_id)
        assert group is not None
        out = cm.heartbeat(group, member_id, generation, instance_id, now_ms)
        self._apply(out.timers)
        assert isinstance(out.response, ErrorCode)
        return out.response

    def classic_leave(self, group_id: str, members: tuple[LeaveMember, ...]
                      ) -> tuple[tuple[Record, ...], LeaveResponse, bool]:
        """(records, answer, whether the group lost its last member)."""
        group = self.group(group_id)
        assert group is not None
        out = cm.leave(group, members)
        self._apply(out.timers)
        assert isinstance(out.response, LeaveResponse)
        return out.records, out.response, _emptied(group, out.records)

    def on_timer(self, key: tuple[str, ...], now_ms: int, records: list[Record],
                 txns: dict[str, ch.Txn], topics: TopicsImage | None = None
                 ) -> tuple[str, str] | None:
        """Handle one due consumer timer; returns the (group, member) fenced, if any."""
        if len(key) != 3:
            return None
        kind, gid, mid = key
        group = self.group(gid)
        if group is None:
            return None
        txn = txns.setdefault(gid, ch.Txn(gid, group, records))
        member = txn.current.members.get(mid)
        if member is None:
            return None
        if kind == REBALANCE and member.state != c.STATE_UNREVOKED_PARTITIONS:
            return None
        if kind in (cm.JOIN, cm.SYNC) and member.classic is None:
            return None
        ch.fence_member(txn, mid, topics, now_ms, self._settings(gid))
        return gid, mid

    def on_topics_changed(self, topics: TopicsImage, now_ms: int, records: list[Record]) -> None:
        """Bump the epoch of every group whose subscribed topics' metadata changed and compute
        its new target (members get it on their next heartbeat). Regexes are re-resolved by
        their members' next heartbeats (with the member's authorization)."""
        for gid in sorted(self.store.groups):
            txn = ch.Txn(gid, self.store.groups[gid], records)
            ch.bump_group_epoch(txn, topics, force=False)
            ch.maybe_compute_target(txn, topics, now_ms, self._settings(gid))

    def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None, tuple[Record, ...]]:
        """DeleteGroups: NON_EMPTY_GROUP while members remain, else tombstones of every record
        of the group, group metadata last."""
        g = self.group(group_id)
        if g is None:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", ()
        if g.members:
            return ErrorCode.non_empty_group, f"Consumer group {group_id} is not empty.", ()
        recs = [c.new_regex_tombstone(group_id, rx) for rx in sorted(g.regexes)]
        recs += [c.new_target_member_tombstone(group_id, m) for m in sorted(g.target_assignment)]
        recs.append(c.new_target_metadata_tombstone(group_id))
        recs.append(c.new_group_metadata_tombstone(group_id))
        return ErrorCode.none, None, tuple(recs)

    # -------------------------------------------------------------- offsets

    def delete_offsets(self, group_id: str, parts: tuple[tuple[str, int], ...],
                       stored: Callable[[cr.OffsetCommitKey], bool]
                       ) -> tuple[tuple[tuple[str, int, ErrorCode], ...], tuple[Record, ...]]:
        """OffsetDelete: partitions of topics the group's members subscribe to (names or
        resolved regexes) answer GROUP_SUBSCRIBED_TO_TOPIC; the others' offsets are tombstoned
        (``stored`` says which exist)."""
        group = self.group(group_id)
        subscribed = group.subscribed_topic_names() if group is not None else frozenset()
        out, recs = [], []
        for topic, p in parts:
            if topic in subscribed:
                out.append((topic, p, ErrorCode.group_subscribed_to_topic))
                continue
            key = cr.OffsetCommitKey(group_id, topic, p)
            if stored(key):
                recs.append(Record(key, None))
            out.append((topic, p, ErrorCode.none))
        return tuple(out), tuple(recs)

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int,
                        api_version: int) -> tuple[ErrorCode, str] | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: a commit with epoch < 0 is a simple
        (admin) commit, allowed while the group is empty; otherwise the member must exist
        (UNKNOWN_MEMBER_ID), use OffsetCommit v9+ (UNSUPPORTED_VERSION) and send its current
        epoch (STALE_MEMBER_EPOCH)."""
        g = self.group(group_id)
        assert g is not None
        if member_epoch < 0 and not g.members:
            return None
        member = g.members.get(member_id)
        if member is None:
            return (ErrorCode.unknown_member_id,
                    f"Member {member_id} is not a member of consumer group {group_id}.")
        if member.classic is not None:  # generation = member epoch; any version (Kafka's)
            if member_epoch != member.member_epoch:
                return (ErrorCode.illegal_generation,
                        f"The received generation id {member_epoch} does not match the "
                        f"expected member epoch {member.member_epoch}.")
            return None
        if api_version < 9:
            return (ErrorCode.unsupported_version, "OffsetCommit version 9 or above must be used "
                    "by members using the consumer group protocol.")
        if member_epoch != member.member_epoch:
            return (ErrorCode.stale_member_epoch,
                    f"The member epoch {member_epoch} of member {member_id} is not its current "
                    f"epoch {member.member_epoch}; the member must refresh its assignment.")
        return None

    def validate_txn_commit(self, group_id: str, member_id: str,
                            member_epoch: int) -> ErrorCode | None:
        """TxnOffsetCommit (Kafka ``validateTransactionalOffsetCommit`` over
        ``ConsumerGroup.validateOffsetCommit``): epoch < 0 while the group has no members is a
        simple commit; otherwise the member must exist (UNKNOWN_MEMBER_ID) at the epoch sent
        (ILLEGAL_GENERATION, Kafka's translation of STALE_MEMBER_EPOCH for transactions). Any
        API version is fine (the producer sends it, not the consumer)."""
        g = self.group(group_id)
        assert g is not None
        if member_epoch < 0 and not g.members:
            return None
        member = g.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.illegal_generation
        return None

    def validate_fetch(self, group_id: str, member_id: str | None,
                       member_epoch: int) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetFetch (committed view): without a member id and
        with epoch < 0 anyone may fetch; otherwise the member must exist with that epoch."""
        if not member_id and member_epoch < 0:
            return None
        g = self.committed_group(group_id)
        member = g.members.get(member_id or "") if g is not None else None
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return (ErrorCode.illegal_generation if member.classic is not None
                    else ErrorCode.stale_member_epoch)
        return None

    # -------------------------------------------------------------- lifecycle

    def on_loaded(self, now_ms: int) -> None:
        """Members get a fresh session timeout; members revoking get their rebalance timeout."""
        self.store.journaling = True
        for gid in sorted(self.store.groups):
            group: ConsumerGroup = self.store.groups[gid]
            settings = self._settings(gid)
            for mid in sorted(group.members):
                m = group.members[mid]
                session = (m.classic.session_timeout_ms if m.classic is not None
                           else settings.session_timeout_ms)
                self._schedule((SESSION, gid, mid), now_ms + session)
                if m.state == c.STATE_UNREVOKED_PARTITIONS:
                    self._schedule((REBALANCE, gid, mid), now_ms + max(m.rebalance_timeout_ms, 0))

    def clear(self) -> None:
        self.store.clear()
        self.store.journaling = False


def _emptied(before: ConsumerGroup | None, records: tuple[Record, ...]) -> bool:
    if before is None or not before.members:
        return False
    after: ConsumerGroup | None = before
    for rec in records:
        after = apply_record(after, rec)
    return after is not None and not after.members


def state_of(group: ConsumerGroup | None) -> str:
    return group.state.value if group is not None else ConsumerGroupState.DEAD.value
