"""Authorization: who may do what on which resource, checked by handlers before they act.

Concept (Kafka's ``Authorizer``, ``AuthHelper`` and the checks of ``KafkaApis``/``ControllerApis``,
KIP-932's security section): a handler asks ``ctx.authorized(operation, resource)`` or, for the
names of a request, ``ctx.denied(operation, resource_type, names)`` (``broker/context.py``), and
answers a refusal with the RPC's authorization error *where Kafka puts it* (per partition, per
topic, per group, or top level). Each distinct resource is asked once per request, never once
per partition.

``Broker.authorizer`` is one of two implementations of ``Authorizer``:

* ``DefaultAuthorizer`` (``authorizer.class.name`` empty, the default): authorization off.
  CLUSTER_ACTION (the inter-broker RPCs) only for ``super.users``, everything else for everyone.
  It is not ``enforcing``, so the context answers every other question without calling it:
  share-consume pays one attribute test per request.
* ``AclSeam`` (``broker/security/setup.py``) over the ACL authorizer (``broker/security/
  authorizer.py``: Kafka's StandardAuthorizer rules, LITERAL/PREFIXED/``*``, DENY wins, implied
  DESCRIBE), selected by Kafka's class names.

Refusals are counted in ``shoal_authorization_denied_total{operation, resource_type}`` and logged
on the ``shoal.authorizer`` logger (principal, host, operation, resource), rate-limited by
``DenialLog``: the first refusal of a (principal, operation, resource) at once, then at most one
line per 10 s carrying how many were not logged. Probes that only shape an answer (Kafka's
``logIfDenied = false``: the quiet checks below) are neither counted nor logged. Error messages
name the principal, the operation, the resource and the ACL that would allow it (``refusal``).

The table as built, one row per module of ``broker/handlers/`` (TAF/GAF/CAF = TOPIC_/GROUP_/
CLUSTER_AUTHORIZATION_FAILED; "quiet": neither counted nor logged; "first": before the existence
checks, so a refused name reveals nothing):

=========================  ========================================  ===========================
API (key)                  Checks                                    Refusal
=========================  ========================================  ===========================
Produce (0)                TOPIC WRITE                               TAF per partition, first
                           with a transactional id: TRANSACTIONAL_   TRANSACTIONAL_ID_AUTHORIZA-
                           ID WRITE, before the topics               TION_FAILED every partition
Fetch (1)                  TOPIC READ (a consumer fetch)             TAF per partition, first
ListOffsets (2)            TOPIC DESCRIBE                            TAF per partition, first
Metadata (3)               all topics: TOPIC DESCRIBE (quiet)        topic left out
                           named: TOPIC DESCRIBE                     TAF, first (by id: TAF with
                                                                     the id, no name)
                           auto-creation: CLUSTER CREATE (quiet)     TAF
                           or TOPIC CREATE
                           bitfields when asked (v8+): the topic's;  cluster bitfield 0
                           the cluster's (v8-10) if CLUSTER
                           DESCRIBE (quiet)
OffsetCommit (8)           GROUP READ; TOPIC READ                    GAF per partition; TAF per
                                                                     partition, not committed
OffsetFetch (9)            GROUP DESCRIBE; named topics: TOPIC       GAF per group; TAF per
                           DESCRIBE; all topics: TOPIC DESCRIBE      partition; topic left out
                           (quiet)
JoinGroup (11),            GROUP READ                                GAF
Heartbeat (12),
LeaveGroup (13),
SyncGroup (14)
FindCoordinator (10)       GROUP key: GROUP DESCRIBE                 GAF per key
                           TRANSACTION key: TRANSACTIONAL_ID         TRANSACTIONAL_ID_AUTHORIZA-
                           DESCRIBE                                  TION_FAILED per key
                           SHARE key: CLUSTER CLUSTER_ACTION         CAF per key
DescribeGroups (15)        GROUP DESCRIBE; bitfield when asked       GAF per group (state Dead)
ListGroups (16)            CLUSTER DESCRIBE (quiet) lists all, else  group left out
                           GROUP DESCRIBE per group (quiet)
ApiVersions (18)           none                                      -
CreateTopics (19)          CLUSTER CREATE (quiet) or TOPIC CREATE    TAF per topic (after the
                                                                     duplicate check)
                           TOPIC DESCRIBE_CONFIGS (quiet) to return  topic_config_error_code
                           configs, partitions, replication          TAF; created anyway
DeleteTopics (20)          CLUSTER DELETE (quiet), or TOPIC          TAF; an unknown name is TAF
                           DESCRIBE and TOPIC DELETE                 unless describable; by id,
                                                                     the name only if describable
DeleteRecords (21)         TOPIC DELETE                              TAF per partition, first
InitProducerId (22)        with a transactional id: TRANSACTIONAL_   TRANSACTIONAL_ID_AUTHORIZA-
                           ID WRITE                                  TION_FAILED (TIAF)
                           without: CLUSTER IDEMPOTENT_WRITE         CAF
                           (quiet), or WRITE on some topic (by
                           resource type)
AddPartitionsToTxn (24)    v0-3: TRANSACTIONAL_ID WRITE; TOPIC       TIAF on every partition;
                           WRITE (internal topics never)             TAF per partition, the
                                                                     others OPERATION_NOT_
                                                                     ATTEMPTED, nothing added
                           v4+: CLUSTER CLUSTER_ACTION               CAF top level
AddOffsetsToTxn (25)       TRANSACTIONAL_ID WRITE; GROUP READ        TIAF; GAF
EndTxn (26)                TRANSACTIONAL_ID WRITE                    TIAF
WriteTxnMarkers (27)       CLUSTER ALTER (quiet, with an ACL         CAF per partition, nothing
                           authorizer only) or CLUSTER               written
                           CLUSTER_ACTION
TxnOffsetCommit (28)       TRANSACTIONAL_ID WRITE; GROUP READ;       TRANSACTIONAL_ID_AUTHORIZA-
                           TOPIC READ                                TION_FAILED / GAF per
                                                                     partition; TAF per partition,
                                                                     not committed
DescribeAcls (29)          CLUSTER DESCRIBE                          CAF (SECURITY_DISABLED when
                                                                     authorization is off)
CreateAcls (30),           CLUSTER ALTER                             CAF per creation / filter
DeleteAcls (31)
DescribeConfigs (32)       DESCRIBE_CONFIGS on the TOPIC, on the     TAF / CAF / GAF per resource
                           CLUSTER (BROKER, BROKER_LOGGER), on the
                           GROUP
AlterConfigs (33),         ALTER_CONFIGS on the same resources,      TAF / CAF / GAF per resource
IncrementalAlter-          after the duplicate check
Configs (44)
CreatePartitions (37)      TOPIC ALTER (after the duplicate check)   TAF per topic, first
DeleteGroups (42)          GROUP DELETE                              GAF per group
ElectLeaders (43)          CLUSTER ALTER                             CAF top level (v1+) and
                                                                     per partition
AlterPartitionReassign-    CLUSTER ALTER                             CAF top level and per
ments (45)                                                           partition, nothing moved
ListPartitionReassign-     CLUSTER DESCRIBE                          CAF top level
ments (46)
OffsetDelete (47)          GROUP DELETE; TOPIC READ                  GAF top level; TAF per
                                                                     partition, offsets kept
DescribeUserScram-         CLUSTER DESCRIBE; without an ACL          CAF per user (see below)
Credentials (50)           authorizer, super.users only
AlterUserScram-            CLUSTER ALTER; without an ACL             CAF per user, nothing
Credentials (51)           authorizer, super.users only              written
DescribeCluster (60)       none; bitfield when asked, if CLUSTER     bitfield 0
                           DESCRIBE (quiet)
DescribeTransactions (65)  TRANSACTIONAL_ID DESCRIBE; TOPIC          TIAF per id; partitions of
                           DESCRIBE (quiet) per listed topic         a refused topic left out
ListTransactions (66)      TRANSACTIONAL_ID DESCRIBE (quiet)         id left out
ConsumerGroup-             GROUP READ; TOPIC DESCRIBE on every       GAF; TAF (top level) if any
Heartbeat (68)             subscribed topic name; a regex matches    named topic is refused
                           only topics allowed TOPIC DESCRIBE
                           (quiet)
ConsumerGroup-             GROUP DESCRIBE; bitfield when asked;      GAF per group; TAF for a
Describe (69)              with ACLs, TOPIC DESCRIBE (quiet) on the  group holding a refused
                           members' assigned topics                  topic (members hidden)
ShareGroupHeartbeat (76)   GROUP READ; TOPIC DESCRIBE on every       GAF; TAF (top level) if any
                           subscribed topic                          subscribed topic is refused
ShareGroupDescribe (77)    GROUP DESCRIBE; bitfield when asked;      GAF per group; TAF for a
                           with ACLs, TOPIC DESCRIBE (quiet) on the  group holding a refused
                           members' assigned topics                  topic (members hidden)
ShareFetch (78)            GROUP READ; TOPIC READ on every topic of  GAF top level; TAF per
                           the session and the request               partition (it stays in the
                                                                     session), acks not applied
ShareAcknowledge (79)      GROUP READ; TOPIC READ                    GAF top level; TAF per
                                                                     partition, not applied
Share-state RPCs (83-87)   CLUSTER CLUSTER_ACTION                    CAF per partition, nothing
                                                                     read or written
DescribeShareGroup-        GROUP DESCRIBE; TOPIC DESCRIBE per named  GAF per group; TAF per
Offsets (90)               topic; all topics: TOPIC DESCRIBE (quiet) partition; topic left out
AlterShareGroup-           GROUP READ; TOPIC READ                    GAF top level; TAF per
Offsets (91)                                                         partition, left alone
DeleteShareGroup-          GROUP DELETE; TOPIC READ                  GAF top level; TAF per
Offsets (92)                                                         topic, offsets kept
=========================  ========================================  ===========================

Deliberate differences from Kafka:

* Without an authorizer Kafka allows everything; Shoal still keeps CLUSTER_ACTION for
  ``super.users`` (the share-state RPCs must not be reachable by clients), so an
  AuthorizedOperations bitfield computed without ACLs leaves out CLUSTER_ACTION.
* The SCRAM credential RPCs (50, 51) without an ACL authorizer: Kafka lets anyone list the
  users and create, replace or delete any credential, which would let any client give itself a
  super user's password and log in as it. Shoal keeps them to ``super.users``
  (``RequestContext.authorized_cluster_admin``); ``shoal broker --add-scram`` bootstraps the
  first one. With an ACL authorizer Kafka's rules apply.
* Fetch: Shoal has no followers, so every Fetch is a consumer fetch needing TOPIC READ;
  a ReplicaId grants nothing (Kafka would ask CLUSTER_ACTION of a follower).
* Produce with acks=0 still gets no answer when refused (Kafka closes the connection).
* WriteTxnMarkers without an ACL authorizer: Kafka lets anyone send it; Shoal keeps it to
  CLUSTER_ACTION (``super.users``), as the share-state RPCs (its coordinator writes markers
  in process and needs no RPC).
* DescribeUserScramCredentials answers a refusal per user rather than top level (a top-level
  error crashes confluent-kafka 2.16.1; see its handler).
* DescribeGroups and ShareGroupDescribe answer in request order; Kafka lists the refused groups
  first (clients match answers by group id).
* FindCoordinator SHARE keys: CAF per key; Kafka fails the whole request.
* ShareGroupDescribe also asks TOPIC DESCRIBE only when an ACL authorizer is configured, as
  Kafka does (``authorizerPlugin.isDefined``).

Invariant: an RPC in ``CLUSTER_ACTION_APIS`` never reaches the share coordinator for a principal
the authorizer refuses; no handler changes state for a refused resource.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from protocol.acl_types import SUPPORTED_OPERATIONS, operations_bitfield
from protocol.acl_types import ResourceType as AclResourceType


@dataclass(frozen=True, slots=True)
class Principal:
    """A Kafka principal, ``type:name`` (``User:ANONYMOUS``)."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``User:alice`` -> Principal("User", "alice").

        Raises:
            ValueError: no ``type:`` prefix or an empty name.
        """
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {text!r} must look like User:NAME")
        return cls(kind, name)


ANONYMOUS = Principal("User", "ANONYMOUS")
"""The principal of every connection on a listener without authentication (Kafka's name)."""


class Operation(enum.Enum):
    """Kafka ACL operations a handler can ask about."""

    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"

    # Members are singletons compared by identity; Enum's own __hash__ hashes the name in Python
    # code, which showed up in every authorization check (dict lookups keyed by operation).
    __hash__ = object.__hash__


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"

    __hash__ = object.__hash__  # as Operation's


@dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    name: str


CLUSTER = Resource(ResourceType.CLUSTER, "kafka-cluster")
"""Kafka's one CLUSTER resource (``kafka-cluster``)."""

# Share-state RPCs: inter-broker only, authorized as CLUSTER_ACTION (reference section 1,
# seeds: "an inter-broker RPC authorized as a cluster action").
CLUSTER_ACTION_APIS = frozenset({83, 84, 85, 86, 87})


class Authorizer(Protocol):
    """What handlers ask, through ``RequestContext`` (``broker/context.py``)."""

    # False: the authorizer allows every operation but CLUSTER_ACTION to everyone, so the
    # context skips it (the fast path with authorization off).
    enforcing: bool

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        """Whether ``principal``, connected from ``host``, may perform ``operation`` on
        ``resource``."""
        ...

    def authorized_operations(self, principal: Principal, resource: Resource,
                              host: str = "*") -> int:
        """The AuthorizedOperations bitfield (bit ``1 << Kafka operation code``) of the
        operations ``resource``'s type supports that ``principal`` may perform on it."""
        ...

    def authorize_by_resource_type(self, principal: Principal, operation: Operation,
                                   resource_type: ResourceType, host: str = "*") -> bool:
        """Whether ``principal`` may perform ``operation`` on *some* resource of the type."""
        ...


def parse_super_users(value: str) -> frozenset[Principal]:
    """``super.users`` (``User:a;User:b``) as principals.

    Raises:
        ValueError: an entry is not ``type:name``.
    """
    return frozenset(Principal.parse(p) for p in value.split(";") if p.strip())


class DefaultAuthorizer:
    """Authorization off: CLUSTER_ACTION only for ``super.users``, everything else for anyone."""

    enforcing = False

    def __init__(self, super_users: Iterable[Principal] = ()) -> None:
        self.super_users = frozenset(super_users)

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        if principal in self.super_users:
            return True
        return operation is not Operation.CLUSTER_ACTION

    def authorized_operations(self, principal: Principal, resource: Resource,
                              host: str = "*") -> int:
        ops = SUPPORTED_OPERATIONS.get(AclResourceType[resource.type.name], ())
        return operations_bitfield(
            op for op in ops
            if self.authorize(principal, Operation[op.name], resource, host))

    def authorize_by_resource_type(self, principal: Principal, operation: Operation,
                                   resource_type: ResourceType, host: str = "*") -> bool:
        return principal in self.super_users or operation is not Operation.CLUSTER_ACTION


def cluster_admin_refusal(principal: Principal, operation: Operation, what: str,
                          enforcing: bool) -> str:
    """The error message of a refused ``RequestContext.authorized_cluster_admin``: ``what`` the
    principal tried, and what would allow it with or without an ACL authorizer."""
    if enforcing:
        return (f"{principal} is not authorized to {what}: it needs {operation.name} on the "
                "CLUSTER resource")
    return (f"{principal} is not authorized to {what}: without an ACL authorizer only "
            "super.users may (list the principal in super.users)")


def cluster_action_refusal(principal: Principal) -> str:
    """The error message sent with CLUSTER_AUTHORIZATION_FAILED (operators read it in clients)."""
    return (f"{principal} is not authorized for CLUSTER_ACTION: this is an inter-broker RPC that "
            "clients may not send (list a principal in super.users to allow it)")


OPERATIONS_NOT_REQUESTED = -2147483648
"""An AuthorizedOperations field the client did not ask for (Kafka's ``Integer.MIN_VALUE``)."""


def refusal(principal: Principal, operation: Operation, resource: Resource,
            host: str | None = None) -> str:
    """The error message sent with a TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED: who was refused
    what, and the ACL that would allow it (operators read it in client logs)."""
    what = "the cluster" if resource.type is ResourceType.CLUSTER else \
        f"{resource.type.name.lower()} {resource.name!r}"
    source = f" from {host}" if host else ""
    flag = {ResourceType.TOPIC: f"--topic {resource.name}",
            ResourceType.GROUP: f"--group {resource.name}",
            ResourceType.CLUSTER: "--cluster",
            ResourceType.TRANSACTIONAL_ID: f"--transactional-id {resource.name}"}[resource.type]
    return (f"{principal}{source} is not authorized to {operation.name} {what}; an ACL "
            f"'--allow-principal {principal} --operation {operation.name} {flag}' allows it "
            "(CreateAcls: kafka-acls.sh --add, or the shoal CLI's acls verb)")


class DenialLog:
    """Rate limit for the log lines of refused operations (sans-IO: the caller passes ``now_ms``).

    The first refusal of a (principal, operation, resource) is logged at once; later ones are
    counted and logged at most once per ``interval_ms``, with how many were not logged since the
    previous line. At most ``max_keys`` keys are remembered; when full the table starts over
    (worst case: one extra line per key).
    """

    def __init__(self, interval_ms: int = 10_000, max_keys: int = 10_000) -> None:
        self.interval_ms = interval_ms
        self.max_keys = max_keys
        self._keys: dict[object, list[int]] = {}  # key -> [last logged at, refusals not logged]

    def record(self, key: object, now_ms: int) -> int | None:
        """Note one refusal: None when it should not be logged, else the number of refusals of
        ``key`` not logged since the previous line (0 for the first)."""
        entry = self._keys.get(key)
        if entry is None:
            if len(self._keys) >= self.max_keys:
                self._keys.clear()
            self._keys[key] = [now_ms, 0]
            return 0
        if now_ms - entry[0] < self.interval_ms:
            entry[1] += 1
            return None
        suppressed = entry[1]
        entry[0], entry[1] = now_ms, 0
        return suppressed
