"""Authorization: who may do what on which resource, checked by handlers before they act.

Concept (Kafka's ``Authorizer`` and ``AuthHelper``, KIP-932 security section): a handler asks
``ctx.broker.authorizer.authorize(ctx.principal, operation, resource)`` and answers the RPC's
authorization error *per entry of its typed response* when refused, as Kafka's request handlers
do (every partition of a share-state request gets CLUSTER_AUTHORIZATION_FAILED; nothing is read
or written).

Today Shoal has one PLAINTEXT listener without authentication, so every connection's principal is
``ANONYMOUS``. ``DefaultAuthorizer`` therefore only protects what no client may ever do: the
inter-broker RPCs authorized as CLUSTER_ACTION on the CLUSTER resource (the share-state RPCs
83-87, FindCoordinator for SHARE keys). It allows CLUSTER_ACTION to principals listed in
``super.users`` (Kafka's name and syntax, ``User:NAME;User:OTHER``; empty by default) and
everything else to everyone. The broker itself never goes through here: its persister calls the
share coordinator in-process (``persister/coordinator_persister.py``).

The security issue replaces ``DefaultAuthorizer`` with an ACL authorizer (principals from TLS/SASL,
ACL bindings) by assigning another ``Authorizer`` to ``Broker.authorizer``; handlers do not change.

Invariant: an RPC in ``CLUSTER_ACTION_APIS`` never reaches the share coordinator for a principal
the authorizer refuses.
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
