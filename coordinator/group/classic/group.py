"""Classic consumer groups: JoinGroup/SyncGroup/Heartbeat/LeaveGroup membership.

Concept (after Kafka's ``ClassicGroup`` and the classic paths of ``GroupMetadataManager``): a
sans-IO state machine living inside ``GroupCoordinatorShard``, driven with an injected
``now_ms``; the broker only relays the client assignors' metadata and assignments. Committed
offsets are another concept (``offsets.py``, shared with consumer-protocol groups): this module
validates who may commit (a member of the current generation, or a simple commit to an Empty
group, as Kafka's ``ClassicGroup.validateOffsetCommit``) and whether OffsetDelete/DeleteGroups may
touch a group, and hands the records to ``self.offsets``.

Hard state is the fold of records (STYLE.md 1.3): ``GroupMetadata`` (generation, protocol, leader,
members with subscription and assignment bytes; written when a generation's assignment is synced
and when a rebalance ends with no members), replayed into the partition's ``DurableStore``
(``offsets.py``; it holds the OffsetCommit records too), which keeps an undo log so
``revert``/committed reads work as for share groups.

Soft state (as in Kafka): members taking part in a rebalance, their pending JoinGroup/SyncGroup
answers, session and rebalance deadlines. Ops change it directly (Kafka does the same; a failed
append answers the op with an error and the members rejoin). After a load, each group is rebuilt
from its GroupMetadata value (Stable with its members, or Empty) and members get a fresh session.

Deferred answers: JoinGroup waits until every member rejoined (or the rebalance timeout) and a
follower's SyncGroup waits for the leader's. Such an op answers ``PENDING`` and the answer is later
handed to ``deliver(waiter, response)`` (injected) with the ``waiter`` id the caller passed in.
Answers released by an op that writes records wait for those records to commit (``commit``).

Bounds as Kafka's: a GroupMetadata record must fit ``message.max.bytes`` (else SyncGroup answers
UNKNOWN_SERVER_ERROR and the group rebalances); sizes of JoinGroup itself are bounded only by the
request size. A ``consumer`` group's subscribed topics are read from its members' metadata at
each generation (``consumer/protocol.py``), for OffsetDelete. Groups that hold nothing (a refused
join, a MEMBER_ID_REQUIRED id never used) are forgotten at once.

States: Empty -> PreparingRebalance (a join) -> CompletingRebalance (all joined: generation + 1,
leader chosen, join answers sent) -> Stable (leader's SyncGroup: assignments written) -> back to
PreparingRebalance on a new member, a leave, an expiry or a leader/protocol change. Dead after
DeleteGroups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.consumer.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    group_subscription,
)
from coordinator.group.record import Record

PENDING: Any = object()  # an op's response that is delivered later through ``deliver``
UNKNOWN_MEMBER = ""
GROUP_TYPE = "classic"
JOIN_TIMER = "c-join"
SYNC_TIMER = "c-sync"
SESSION_TIMER = "c-session"


class ClassicState(Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicSettings:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 0x7FFFFFFF
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # How often a group with members has its unsubscribed topics' offsets looked at.
    offsets_retention_check_interval_ms: int = 600_000
    # Largest GroupMetadata record (message.max.bytes, as Kafka's coordinator runtime bounds a
    # batch by __consumer_offsets' max message size): the members' metadata and assignments.
    max_record_bytes: int = 1024 * 1024 + 12


# ------------------------------------------------------------------------ requests / responses


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool
    client_id: str = ""
    client_host: str = ""
    skip_assignment_supported: bool = False  # JoinGroup v9+ (KIP-814)


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error_code: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    detail: str = ""  # why, for the broker's log (not on the wire)


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error_code: ErrorCode
    members: tuple[tuple[LeaveMember, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]


# ------------------------------------------------------------------------ soft state


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: int | None = None
    sync_waiter: int | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicState = ClassicState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    initial_delay: bool = False  # the first rebalance of an Empty group is being delayed
    state_timestamp: int = 0
    # Topics the members subscribe to, as of the last generation (Kafka's subscribedTopics);
    # None when unknown (not a "consumer" group, or metadata that does not parse).
    subscribed: frozenset[str] | None = None

    def subscribes_to(self, topic: str) -> bool:
        """Kafka's isSubscribedToTopic: unknown counts as subscribed for a consumer group."""
        if self.subscribed is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE
        return topic in self.subscribed

    def compute_subscribed(self) -> None:
        if not self.members and self.protocol_type == CONSUMER_PROTOCOL_TYPE:
            self.subscribed = frozenset()
        elif self.protocol is None:
            self.subscribed = None
        else:
            self.subscribed = group_subscription(
                self.protocol_type, [m.metadata(self.protocol) for m in self.members.values()])

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        for m in self.members.values():
            if m.group_instance_id == instance_id:
                return m
        return None

    def supports(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return self.protocol_type == protocol_type and bool(names & self.candidates())

    def candidates(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        cands = self.candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in cands:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            return None
        # Most votes wins; ties go to the first candidate in the leader's preference order.
        order = [n for n, _ in self.members[self.leader].protocols] if self.leader in \
            self.members else sorted(cands)
        return max(votes, key=lambda n: (votes[n], -order.index(n) if n in order else 0))


MEMBER_ID_PREFIX_CHARS = 1000


Deliver = Callable[[int, Any], None]


@dataclass(slots=True)
class Effects:
    """What one op produced: records to append and answers to other waiters (released after the
    records commit)."""

    records: list[Record] = field(default_factory=list)
    deliveries: list[tuple[int, Any]] = field(default_factory=list)
