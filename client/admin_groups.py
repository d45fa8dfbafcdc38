"""Consumer-group admin calls over the blocking admin client (``client/admin_wire.py``): what
``shoal consumer-groups`` is built on, usable by any Python tool.

- ``list_groups``: ListGroups v5 on every broker (types and states filters; a broker before v5
  gets the type from the protocol type: ``share`` or classic).
- ``describe_group``: on the group's coordinator, ConsumerGroupDescribe when the broker serves it
  (KIP-848 consumer groups: member epochs, assignments and target assignments); a classic group
  answers GROUP_ID_NOT_FOUND there and is described with DescribeGroups, whose consumer-protocol
  assignment bytes are decoded here (``decode_assignment``). An id of another type (a share
  group) raises ``WrongGroupType``.
- ``fetch_offsets`` (OffsetFetch, batched form from v8), ``commit_offsets`` (OffsetCommit as an
  admin: generation -1 and no member id, which a broker accepts only while the group has no
  members).

Failures raise ``CliError`` (one line: what failed and what to do).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from client.admin_wire import CliError, Cluster, Connection, Node, error_text
from protocol.codec import request_module
from protocol.messages import make

OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
DELETE_GROUPS, OFFSET_DELETE, CONSUMER_GROUP_DESCRIBE = 42, 47, 69
OFFSET_FETCH_BATCHED = 8  # first OffsetFetch version with the groups array

CLASSIC, CONSUMER, SHARE = "classic", "consumer", "share"
GROUP_TYPES = (CLASSIC, CONSUMER, SHARE)
TYPE_NAMES = {CLASSIC: "Classic", CONSUMER: "Consumer", SHARE: "Share"}
# States of every group type (classic, consumer and share groups), as ListGroups names them.
STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling",
          "Stable", "Dead")
INACTIVE = ("Empty", "Dead")

HINTS = {
    ErrorCode.non_empty_group: "stop its consumers first",
    ErrorCode.unknown_member_id: "the group has active members; stop its consumers first",
    ErrorCode.group_subscribed_to_topic: "the group's members consume this topic; stop them "
                                         "first",
    ErrorCode.group_id_not_found: "list groups with --list",
    ErrorCode.unknown_topic_or_partition: "check the topic with shoal topics --list",
    ErrorCode.coordinator_not_available: "retry shortly",
    ErrorCode.coordinator_load_in_progress: "retry shortly",
    ErrorCode.not_coordinator: "retry shortly",
    ErrorCode.rebalance_in_progress: "the group is rebalancing; stop its consumers first",
    ErrorCode.group_authorization_failed: "ask for an ACL on the group",
    ErrorCode.topic_authorization_failed: "ask for an ACL on the topic",
}


def hinted(code: ErrorCode | int, message: str | None = None) -> str:
    hint = HINTS.get(ErrorCode(int(code)))
    return error_text(code, message) + (f"; {hint}" if hint else "")


class WrongGroupType(CliError):
    """The id belongs to a group of another type (``group_type``: share, or one this client
    cannot describe)."""

    def __init__(self, group_id: str, group_type: str, message: str) -> None:
        super().__init__(message)
        self.group_id = group_id
        self.group_type = group_type


# --------------------------------------------------------------------------- list


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    group_type: str  # classic | consumer | share (or another type a broker reports)
    state: str


def group_type_of(g: Any) -> str:
    """The group type of a ListGroups entry; before v5 (no GroupType) from the protocol type:
    ``share`` is a share group, anything else a classic group (as Kafka's admin client)."""
    declared = getattr(g, "group_type", "") or ""
    if declared:
        return str(declared).lower()
    return SHARE if g.protocol_type == SHARE else CLASSIC


def list_groups(cluster: Cluster, types: Sequence[str] = (),
                states: Sequence[str] = ()) -> list[ListedGroup]:
    """Every group of every broker (ListGroups), filtered by type and state, sorted by id.

    Raises:
        CliError: a broker refuses the listing.
    """
    wanted_types = {t.lower() for t in types}
    wanted_states = {s.lower() for s in states}
    found: dict[str, ListedGroup] = {}
    for node_id in cluster.broker_ids():
        conn = cluster.node(node_id)
        _, resp = conn.call(LIST_GROUPS, "ListGroupsRequest", states_filter=tuple(states),
                            types_filter=tuple(types))
        if resp.error_code != ErrorCode.none:
            raise CliError(f"cannot list groups on {conn.address}: {hinted(resp.error_code)}")
        for g in resp.groups:
            listed = ListedGroup(g.group_id, group_type_of(g), getattr(g, "group_state", "") or "")
            # Filter again: a broker before ListGroups v4/v5 ignores the filters it lacks.
            if wanted_types and listed.group_type not in wanted_types:
                continue
            if wanted_states and listed.state and listed.state.lower() not in wanted_states:
                continue
            found[g.group_id] = listed
    return [found[g] for g in sorted(found)]


# --------------------------------------------------------------------------- describe


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]
    epoch: int | None = None  # consumer groups only
    target: dict[str, list[int]] | None = None  # consumer groups only


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    group_type: str
    state: str
    strategy: str  # the classic protocol name, or the consumer group's assignor
    coordinator: Node
    conn: Connection
    members: list[Member] = field(default_factory=list)
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def inactive(self) -> bool:
        return self.state in INACTIVE and not self.members


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """A consumer-protocol assignment (``ConsumerProtocolAssignment`` v0-3: version, then topics
    with their partitions, then user data) -> topic -> partitions. Bytes that are not one (a
    non-consumer protocol, or damaged) give an empty assignment."""
    if not data:
        return {}
    out: dict[str, list[int]] = {}
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version < 0:
            return {}
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if count < 0 or count > len(data):
            return {}
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return {}
            topic = data[pos:pos + n].decode("utf-8")
            pos += n
            (k,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if k < 0 or pos + 4 * k > len(data):
                return {}
            parts = struct.unpack_from(f">{k}i", data, pos)
            pos += 4 * k
            out.setdefault(topic, []).extend(parts)
    except (struct.error, UnicodeDecodeError):
        return {}
    return {t: sorted(ps) for t, ps in out.items()}


def _topic_partitions(assignment: Any) -> dict[str, list[int]]:
    if assignment is None:
        return {}
    return {tp.topic_name: sorted(int(p) for p in tp.partitions)
            for tp in assignment.topic_partitions}


def _other_type(gid: str, conn: Connection) -> WrongGroupType | None:
    """For an id DescribeGroups does not describe: ``WrongGroupType`` if ListGroups on the
    coordinator knows it under another type, None if the id is unknown."""
    _, resp = conn.call(LIST_GROUPS, "ListGroupsRequest", states_filter=(), types_filter=())
    for g in resp.groups:
        if g.group_id == gid:
            kind = group_type_of(g)
            return WrongGroupType(gid, kind, f"group {gid!r} is a {kind} group, which the "
                                  f"broker at {conn.address} does not describe as a consumer "
                                  "group")
    return None


def describe_group(cluster: Cluster, gid: str) -> Group | None:
    """A classic or consumer group, from its coordinator; None if the id is unknown.

    Raises:
        WrongGroupType: the id belongs to a share group (or a type this client cannot describe).
        CliError: the coordinator answers an error.
    """
    node, conn = cluster.coordinator(gid)
    if conn.supports(CONSUMER_GROUP_DESCRIBE):
        _, resp = conn.call(CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribeRequest",
                            group_ids=(gid,), include_authorized_operations=False)
        (g,) = resp.groups
        if g.error_code == ErrorCode.none:
            members = [Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                              _topic_partitions(m.assignment), int(m.member_epoch),
                              _topic_partitions(m.target_assignment))
                       for m in sorted(g.members, key=lambda m: m.member_id)]
            return Group(gid, CONSUMER, g.group_state, g.assignor_name, node, conn, members,
                         int(g.group_epoch), int(g.assignment_epoch))
        if g.error_code != ErrorCode.group_id_not_found:
            raise CliError(f"cannot describe consumer group {gid!r}: "
                           f"{hinted(g.error_code, g.error_message)}")
    _, resp = conn.call(DESCRIBE_GROUPS, "DescribeGroupsRequest", groups=(gid,),
                        include_authorized_operations=False)
    (g,) = resp.groups
    if g.error_code == ErrorCode.group_id_not_found or \
            (g.error_code == ErrorCode.none and g.group_state == "Dead"):
        problem = _other_type(gid, conn)
        if problem is not None:
            raise problem
        return None
    if g.error_code != ErrorCode.none:
        raise CliError(f"cannot describe consumer group {gid!r}: "
                       f"{hinted(g.error_code, getattr(g, 'error_message', None))}")
    if g.protocol_type == SHARE:
        raise _other_type(gid, conn) or WrongGroupType(
            gid, SHARE, f"group {gid!r} is a share group")
    consumer_protocol = g.protocol_type == "consumer"
    members = [Member(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                      m.client_host,
                      decode_assignment(m.member_assignment) if consumer_protocol else {})
               for m in sorted(g.members, key=lambda m: m.member_id)]
    return Group(gid, CLASSIC, g.group_state, g.protocol_data, node, conn, members)


def fetch_offsets(conn: Connection, gid: str) -> dict[tuple[str, int], tuple[int, int]]:
    """The group's committed offsets: (topic, partition) -> (offset, leader epoch).

    Raises:
        CliError: a group-level or partition error.
    """
    version = conn.version(OFFSET_FETCH)
    m = request_module(OFFSET_FETCH, version)
    if version >= OFFSET_FETCH_BATCHED:
        _, resp = conn.call(OFFSET_FETCH, "OffsetFetchRequest", require_stable=True, groups=(
            make(m.OffsetFetchRequestGroup, group_id=gid, member_id=None, member_epoch=-1,
                 topics=None),))
        (g,) = resp.groups
        error, topics = g.error_code, g.topics
    else:
        _, resp = conn.call(OFFSET_FETCH, "OffsetFetchRequest", group_id=gid, topics=None,
                            require_stable=True)
        error, topics = getattr(resp, "error_code", ErrorCode.none), resp.topics
    if error != ErrorCode.none:
        raise CliError(f"cannot read the committed offsets of group {gid!r}: {hinted(error)}")
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                raise CliError(f"cannot read the committed offset of {t.name}-"
                               f"{p.partition_index} in group {gid!r}: {hinted(p.error_code)}")
            if p.committed_offset >= 0:
                out[(t.name, int(p.partition_index))] = (
                    int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)))
    return out


def commit_offsets(conn: Connection, gid: str, offsets: dict[tuple[str, int], int]
                   ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    """OffsetCommit as an admin (generation -1, no member id); errors by partition."""
    m = request_module(OFFSET_COMMIT, conn.version(OFFSET_COMMIT))
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), off in sorted(offsets.items()):
        by_topic.setdefault(t, []).append((p, off))
    topics = tuple(make(m.OffsetCommitRequestTopic, name=t, partitions=tuple(
        make(m.OffsetCommitRequestPartition, partition_index=p, committed_offset=off,
             committed_leader_epoch=-1, committed_metadata="", commit_timestamp=-1)
        for p, off in parts)) for t, parts in by_topic.items())
    _, resp = conn.call(OFFSET_COMMIT, "OffsetCommitRequest", group_id=gid,
                        generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                        retention_time=-1, topics=topics)
    return {(t.name, int(p.partition_index)): (ErrorCode(int(p.error_code)), None)
            for t in resp.topics for p in t.partitions}
