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

The table as built (every module of ``broker/handlers/``; TAF/GAF/CAF = TOPIC_/GROUP_/
CLUSTER_AUTHORIZATION_FAILED, "quiet" = not counted or logged):

=================================  =====================================================  ==========================================
API (key)                          Checks                                                 Refusal answered as
=================================  =====================================================  ==========================================
Produce (0)                        TOPIC WRITE per topic                                  TAF per partition, before existence
Fetch (1)                          TOPIC READ per topic (consumer fetch)                  TAF per partition (unknown id: UNKNOWN_TOPIC_ID)
ListOffsets (2)                    TOPIC DESCRIBE per topic                               TAF per partition, before existence
Metadata (3)                       all topics: TOPIC DESCRIBE (quiet)                     unauthorized topics left out
                                   named: TOPIC DESCRIBE                                  TAF, existence not told; by id: TAF, id only
                                   auto-create: CLUSTER CREATE (quiet) or TOPIC CREATE    TAF
                                   bitfields (v8+, when asked): topic ops; cluster ops    cluster ops 0 without CLUSTER DESCRIBE
                                   (v8-10) if CLUSTER DESCRIBE (quiet)
FindCoordinator (10)               GROUP key: GROUP DESCRIBE; TRANSACTION key:            GAF / TRANSACTIONAL_ID_AUTHORIZATION_FAILED /
                                   TRANSACTIONAL_ID DESCRIBE; SHARE key: CLUSTER          CAF, per key
                                   CLUSTER_ACTION
DescribeGroups (15)                GROUP DESCRIBE per group; ops bitfield when asked      GAF per group (state Dead)
ListGroups (16)                    CLUSTER DESCRIBE (quiet) lists all, else GROUP         unauthorized groups left out
                                   DESCRIBE per group (quiet)
ApiVersions (18)                   none                                                   -
CreateTopics (19)                  CLUSTER CREATE (quiet) or TOPIC CREATE per topic;      TAF per topic (after duplicates);
                                   TOPIC DESCRIBE_CONFIGS (quiet) to return configs       topic_config_error_code TAF, no configs
DeleteTopics (20)                  CLUSTER DELETE (quiet) or TOPIC DESCRIBE + DELETE      TAF (an unknown name: TAF unless describable,
                                                                                          then UNKNOWN_TOPIC_OR_PARTITION)
DeleteRecords (21)                 TOPIC DELETE per topic                                 TAF per partition, before existence
InitProducerId (22)                CLUSTER IDEMPOTENT_WRITE (quiet) or WRITE on any       CAF (top level)
                                   topic (by resource type)
DescribeAcls (29)                  CLUSTER DESCRIBE                                       CAF (SECURITY_DISABLED without ACLs)
CreateAcls (30), DeleteAcls (31)   CLUSTER ALTER                                          CAF per creation / filter
DescribeConfigs (32)               DESCRIBE_CONFIGS on TOPIC / CLUSTER (BROKER,           TAF / CAF / GAF per resource
                                   BROKER_LOGGER) / GROUP
AlterConfigs (33),                 ALTER_CONFIGS on the same resources, after the         TAF / CAF / GAF per resource
IncrementalAlterConfigs (44)       duplicate check
CreatePartitions (37)              TOPIC ALTER per topic (after duplicates)               TAF per topic, before existence
DeleteGroups (42)                  GROUP DELETE per group                                 GAF per group
DescribeUserScramCredentials (50)  CLUSTER DESCRIBE                                       CAF per user (see below)
AlterUserScramCredentials (51)     CLUSTER ALTER                                          CAF per user
DescribeCluster (60)               none; ops bitfield if CLUSTER DESCRIBE (quiet)         bitfield 0
ShareGroupHeartbeat (76)           GROUP READ; TOPIC DESCRIBE per subscribed topic        GAF; TAF (top level) if any topic refused
ShareGroupDescribe (77)            GROUP DESCRIBE per group; ops bitfield when asked;     GAF per group; TAF per group whose
                                   TOPIC DESCRIBE (quiet) of members' assigned topics     members hold a refused topic (no members)
ShareFetch (78)                    GROUP READ; TOPIC READ per topic of session+request    GAF top level; TAF per partition (kept in
                                                                                          the session), acks not applied
ShareAcknowledge (79)              GROUP READ; TOPIC READ per acknowledged topic          GAF top level; TAF per partition
Initialize/Read/Write/Delete-      CLUSTER CLUSTER_ACTION                                 CAF per partition, nothing read or written
ShareGroupState, ReadShareGroup-
StateSummary (83-87)
DescribeShareGroupOffsets (90)     GROUP DESCRIBE per group; TOPIC DESCRIBE per named     GAF per group; TAF per partition;
                                   topic; all topics: TOPIC DESCRIBE (quiet)              unauthorized topics left out
AlterShareGroupOffsets (91)        GROUP READ; TOPIC READ per topic                       GAF top level; TAF per partition
DeleteShareGroupOffsets (92)       GROUP DELETE; TOPIC READ per topic                     GAF top level; TAF per topic
=================================  =====================================================  ==========================================

Deliberate differences from Kafka:

* Without an authorizer Kafka allows everything; Shoal still keeps CLUSTER_ACTION for
  ``super.users`` (the share-state RPCs must not be reachable by clients), so an
  AuthorizedOperations bitfield computed without ACLs leaves out CLUSTER_ACTION.
* Fetch: Shoal has no followers, so every Fetch is a consumer fetch needing TOPIC READ;
  a ReplicaId grants nothing (Kafka would ask CLUSTER_ACTION of a follower).
* Produce with a transactional id and InitProducerId with one are refused before any
  TRANSACTIONAL_ID check (transactions are not supported); Produce with acks=0 still gets no
  answer when refused (Kafka closes the connection).
* DescribeUserScramCredentials answers a refusal per user rather than top level (a top-level
  error crashes confluent-kafka 2.16.1; see its handler).
* Responses keep request order; Kafka lists refused entries first (DescribeGroups,
  ShareGroupDescribe, DeleteGroups keep theirs last here; clients match by key).
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

from broker.security.acl import SUPPORTED_OPERATIONS, operations_bitfield
from broker.security.acl import ResourceType as AclResourceType


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


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


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
    return (f"{principal}{source} is not authorized to {operation.name} {what}; an ACL such as "
            f"'shoal acls --add --allow-principal {principal} --operation {operation.name} "
            f"{flag}' allows it")


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
