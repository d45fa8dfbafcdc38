"""Choosing the broker's authorizer from Kafka's config names.

``authorizer.class.name`` empty (the default) means no authorization. Kafka's own class names
select Shoal's ACL authorizer, so a ``server.properties`` written for Kafka works unchanged;
any other name is a configuration error (Shoal cannot load Java classes).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from broker.authz import Operation, Principal, Resource
from broker.security.acl import AclOperation
from broker.security.acl import ResourceType as AclResourceType
from broker.security.acl_store import AclStore
from broker.security.authorizer import AclAuthorizer, parse_super_users

if TYPE_CHECKING:
    from broker.config import BrokerConfig

ACL_AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",  # KRaft (Kafka 3.x, 4.x)
    "kafka.security.authorizer.AclAuthorizer",  # ZooKeeper-era Kafka
    "shoal.AclAuthorizer",
)


def authorizer_class_problem(name: str) -> str | None:
    """Why ``authorizer.class.name`` cannot be ``name``, or None."""
    if not name or name in ACL_AUTHORIZER_CLASS_NAMES:
        return None
    return (f"{name!r} is not an authorizer Shoal provides; use "
            f"{ACL_AUTHORIZER_CLASS_NAMES[0]} (or {ACL_AUTHORIZER_CLASS_NAMES[1]}) for ACLs, "
            "or leave it empty for no authorization")


def super_users_problem(value: str) -> str | None:
    """Why ``super.users`` cannot be ``value`` (items must be Type:name, ';'-separated)."""
    try:
        parse_super_users(value)
    except ValueError as exc:
        return str(exc).removeprefix("super.users: ")
    return None


def build_authorizer(config: BrokerConfig, data_dir: Path) -> AclAuthorizer | None:
    """The broker's authorizer, loaded with the stored ACLs; None when authorization is off.

    Raises:
        ConfigError: an unknown authorizer class name or a malformed ``super.users``.
        AclStoreError: the stored ACLs cannot be read.
    """
    from broker.config import ConfigError

    class_name = config.get("authorizer.class.name")
    problem = authorizer_class_problem(class_name)
    if problem:
        raise ConfigError(f"authorizer.class.name: {problem}")
    if not class_name:
        return None
    try:
        super_users = parse_super_users(config.get("super.users"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    store = AclStore(data_dir)
    authorizer = AclAuthorizer(super_users, config.get("allow.everyone.if.no.acl.found"),
                               store.load())
    authorizer.store = store
    return authorizer


class AclSeam:
    """``broker.authz.Authorizer`` answered by the ACL authorizer (what handlers call)."""

    __slots__ = ("acls",)

    def __init__(self, acls: AclAuthorizer) -> None:
        self.acls = acls

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        return self.acls.authorize(str(principal), host, AclOperation[operation.name],
                                   AclResourceType[resource.type.name], resource.name)
