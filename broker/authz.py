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
    """Kafka ACL operations (the ones Shoal checks today, plus those the ACL issue will need)."""

    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"


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
    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        """Whether ``principal``, connected from ``host``, may perform ``operation`` on
        ``resource``."""
        ...


def parse_super_users(value: str) -> frozenset[Principal]:
    """``super.users`` (``User:a;User:b``) as principals.

    Raises:
        ValueError: an entry is not ``type:name``.
    """
    return frozenset(Principal.parse(p) for p in value.split(";") if p.strip())


class DefaultAuthorizer:
    """Until ACLs exist: CLUSTER_ACTION only for ``super.users``, everything else for anyone."""

    def __init__(self, super_users: Iterable[Principal] = ()) -> None:
        self.super_users = frozenset(super_users)

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        if principal in self.super_users:
            return True
        return operation is not Operation.CLUSTER_ACTION


def cluster_action_refusal(principal: Principal) -> str:
    """The error message sent with CLUSTER_AUTHORIZATION_FAILED (operators read it in clients)."""
    return (f"{principal} is not authorized for CLUSTER_ACTION: this is an inter-broker RPC that "
            "clients may not send (list a principal in super.users to allow it)")
