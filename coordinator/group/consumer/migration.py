"""Online migration between classic and consumer groups (KIP-848's upgrade and downgrade).

Concept (Kafka's ``group.consumer.migration.policy``, ``GroupMetadataManager``'s
``validateOnlineUpgrade``/``convertToConsumerGroup``/``convertToClassicGroup``,
``ConsumerGroup.fromClassicGroup`` and ``ClassicGroup.fromConsumerGroup``; our own code): one
group id has one type at a time, and a rolling switch of a group's clients between
``group.protocol=classic`` and ``consumer`` converts the group in place:

- **Upgrade**: a ConsumerGroupHeartbeat joining a non-empty classic group converts it, if the
  policy allows upgrades, the group's protocol type is ``consumer`` and it has no more members
  than ``group.consumer.max.size``. Every classic member becomes a consumer-group member that
  keeps its classic metadata (it goes on using JoinGroup/SyncGroup/Heartbeat, see
  ``classic_members.py``): member epoch = the classic generation, Stable, its assigned partitions
  and target = its last classic assignment. Group epoch and assignment epoch = the generation.
  Otherwise the heartbeat gets GROUP_ID_NOT_FOUND ("is not a consumer group"), as Kafka.
- **Downgrade**: when the last member using the consumer protocol leaves (a leave heartbeat,
  or its session or rebalance timeout) and only classic members remain, the consumer group
  becomes a classic group, if the policy allows downgrades and the remaining members are no more
  than ``group.classic.max.size``: Stable, each member's assignment is its target assignment in
  the consumer protocol's format, the leader is the first member; the classic group then
  rebalances at once.

Deliberate difference: Kafka gives the classic group the consumer group's epoch as its
generation, so its members, Stable at that generation, learn of the rebalance from
REBALANCE_IN_PROGRESS; the rebalance is soft state, and a coordinator that fails before it
completes reloads a Stable group in which the leaver's partitions belong to nobody until the
next membership change. Shoal writes generation = group epoch + 1: the members' heartbeats (at
the group epoch) answer ILLEGAL_GENERATION and they rejoin, before or after a reload.

Durability, as Kafka writes it: an upgrade writes the GroupMetadata tombstone, then each
member's metadata record, the group epoch, each member's target, the target epoch and each
member's current assignment; a downgrade writes tombstones of every record of the consumer group
(``consumer_group_tombstones``) and then the classic group's GroupMetadata. A reload replays
them into the same group. Committed offsets (OffsetCommit records) are shared and untouched.

Pure functions of the group values; the shard applies the records and the soft state.
"""

from __future__ import annotations

import enum
import uuid

from coordinator.group.classic import records as cr
from coordinator.group.classic.group import ClassicGroup, ClassicState, Member
from coordinator.group.consumer import records as c
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from coordinator.group.record import Record
from coordinator.group.topics_image import TopicsImage


class MigrationPolicy(enum.Enum):
    """``group.consumer.migration.policy`` (values compared case-insensitively, as Kafka)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        """Raises ValueError for a name that is not one of the four."""
        return cls(value.strip().lower())


POLICY_NAMES = tuple(p.value for p in MigrationPolicy)


# --------------------------------------------------------------------------- upgrade


def upgrade_refusal(group: ClassicGroup, policy: MigrationPolicy, max_size: int) -> str | None:
    """Why a non-empty classic group cannot become a consumer group now (None: it can)."""
    if not policy.upgrades:
        return "the online upgrade is disabled (group.consumer.migration.policy)"
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return (f"the group's protocol type is {group.protocol_type!r}, not the consumer "
                "protocol's")
    if len(group.members) > max_size:
        return (f"its {len(group.members)} members exceed group.consumer.max.size "
                f"({max_size})")
    return None


def _ids(by_name: dict[str, frozenset[int]], topics: TopicsImage
         ) -> dict[uuid.UUID, frozenset[int]]:
    out = {}
    for name, parts in by_name.items():
        info = topics.get(name)
        if info is not None and parts:
            out[info.topic_id] = parts
    return out


def _names(by_id: dict[uuid.UUID, frozenset[int]], topics: TopicsImage
           ) -> dict[str, frozenset[int]]:
    out = {}
    for tid, parts in by_id.items():
        info = topics.by_id(tid)
        if info is not None and parts:
            out[info.name] = parts
    return out


def classic_member_metadata(session_timeout_ms: int, protocols: tuple[tuple[str, bytes], ...]
                            ) -> c.ClassicMemberMetadata:
    return c.ClassicMemberMetadata(session_timeout_ms,
                                   tuple(c.ClassicProtocol(n, m) for n, m in protocols))


def classic_to_consumer(group: ClassicGroup, topics: TopicsImage, now_ms: int) -> list[Record]:
    """The records that replace ``group`` by the equivalent consumer group (see the module doc).

    Raises:
        SubscriptionFormatError: a member's subscription or assignment is not in the consumer
            protocol's format (the caller answers GROUP_ID_NOT_FOUND, as Kafka).
    """
    gid = group.group_id
    generation = group.generation
    members = []
    for m in group.members.values():
        meta = m.metadata(group.protocol) if group.protocol else m.protocols[0][1]
        sub = decode_subscription(meta)
        assigned = _ids(decode_assignment(m.assignment), topics)
        members.append((m, sub, assigned))
    records = [Record(cr.GroupMetadataKey(gid), None)]
    names: set[str] = set()
    for m, sub, _ in members:
        names.update(sub.topics)
        records.append(c.new_member_record(
            gid, m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=sub.topics,
            subscribed_topic_regex=None, rebalance_timeout_ms=m.rebalance_timeout_ms,
            server_assignor=None,
            classic=classic_member_metadata(m.session_timeout_ms, m.protocols)))
    records.append(c.new_group_metadata_record(gid, generation, topics.metadata_hash(names)))
    for m, _, assigned in members:
        records.append(c.new_target_member_record(gid, m.member_id, assigned))
    records.append(c.new_target_metadata_record(gid, generation, now_ms))
    for m, _, assigned in members:
        records.append(c.new_current_assignment_record(
            gid, m.member_id, member_epoch=generation, previous_member_epoch=generation,
            state=c.STATE_STABLE, assigned=assigned, pending_revocation={}))
    return records


# --------------------------------------------------------------------------- downgrade


def downgrade_refusal(group: ConsumerGroup, leaving: tuple[str, ...], policy: MigrationPolicy,
                      classic_max_size: int) -> str | None:
    """Why ``group`` stays a consumer group when ``leaving`` leave it (None: it becomes a
    classic group). Only a group whose remaining members all use the classic protocol, and
    one of the leaving ones not, is a candidate."""
    remaining = [m for mid, m in group.members.items() if mid not in leaving]
    gone = [group.members[mid] for mid in leaving if mid in group.members]
    if not remaining or not gone or any(not m.uses_classic for m in remaining) \
            or all(m.uses_classic for m in gone):
        return "not a candidate"
    if not policy.downgrades:
        return "the online downgrade is disabled (group.consumer.migration.policy)"
    if len(remaining) > classic_max_size:
        return f"its {len(remaining)} members exceed group.classic.max.size ({classic_max_size})"
    return None


def consumer_group_tombstones(group: ConsumerGroup) -> list[Record]:
    """Tombstones of every record of ``group`` (Kafka's ``createGroupTombstoneRecords``)."""
    gid = group.group_id
    out = []
    for mid in group.members:
        out.append(c.new_current_assignment_tombstone(gid, mid))
    for mid in group.target_assignment:
        out.append(c.new_target_member_tombstone(gid, mid))
    out.append(c.new_target_metadata_tombstone(gid))
    for mid in group.members:
        out.append(c.new_member_tombstone(gid, mid))
    for regex in group.regexes:
        out.append(c.new_regex_tombstone(gid, regex))
    out.append(c.new_group_metadata_tombstone(gid))
    return out


def consumer_to_classic(group: ConsumerGroup, leaving: tuple[str, ...], topics: TopicsImage,
                        now_ms: int) -> ClassicGroup:
    """The classic group that replaces ``group`` once ``leaving`` left (Stable; the caller writes
    its GroupMetadata, then starts a rebalance)."""
    g = ClassicGroup(group.group_id, state=ClassicState.STABLE,
                     protocol_type=CONSUMER_PROTOCOL_TYPE, generation=group.group_epoch + 1,
                     state_timestamp=now_ms)
    for mid, m in group.members.items():
        if mid in leaving or m.classic is None:
            continue
        protocols = tuple((p.name, p.metadata) for p in m.classic.supported_protocols)
        g.members[mid] = Member(mid, m.instance_id, m.client_id, m.client_host,
                                m.classic.session_timeout_ms, m.rebalance_timeout_ms,
                                CONSUMER_PROTOCOL_TYPE, protocols)
        if g.leader is None:
            g.leader = mid
    g.protocol = g.select_protocol()
    for mid, member in g.members.items():
        target = dict(group.target_assignment.get(mid, {}))
        member.assignment = encode_assignment(
            _names(target, topics), subscription_version(member.metadata(g.protocol)))
    g.compute_subscribed()
    return g
