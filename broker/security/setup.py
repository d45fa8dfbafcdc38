"""Choosing the broker's authorizer from Kafka's config names.

``authorizer.class.name`` empty (the default) means no authorization. Kafka's own class names
select Shoal's ACL authorizer, so a ``server.properties`` written for Kafka works unchanged;
any other name is a configuration error (Shoal cannot load Java classes).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from broker.authz import Operation, Principal, Resource, ResourceType
from broker.config_types import ConfigError
from protocol.acl_types import AclOperation
from protocol.acl_types import ResourceType as AclResourceType
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
    """``broker.authz.Authorizer`` answered by the ACL authorizer (what handlers call).

    Translates Shoal's operation and resource enums to the ACL model's with dict lookups, and
    a principal to its ``Type:name`` text once per distinct principal object."""

    __slots__ = ("acls", "_names")

    enforcing = True

    def __init__(self, acls: AclAuthorizer) -> None:
        self.acls = acls
        self._names: dict[Principal, str] = {}

    def _name(self, principal: Principal) -> str:
        name = self._names.get(principal)
        if name is None:
            if len(self._names) >= 10_000:
                self._names.clear()
            name = self._names[principal] = str(principal)
        return name

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        if not isinstance(resource.name, str):
            # A null name from the wire names no resource (handlers refuse it first; this is
            # the backstop: matching it against PREFIXED ACLs would raise).
            return False
        return self.acls.authorize(self._name(principal), host, _OPERATIONS[operation],
                                   _TYPES[resource.type], resource.name)

    def authorized_operations(self, principal: Principal, resource: Resource,
                              host: str = "*") -> int:
        if not isinstance(resource.name, str):
            return 0
        return self.acls.authorized_operations(self._name(principal), host,
                                               _TYPES[resource.type], resource.name)

    def authorize_by_resource_type(self, principal: Principal, operation: Operation,
                                   resource_type: ResourceType, host: str = "*") -> bool:
        return self.acls.authorize_by_resource_type(self._name(principal), host,
                                                    _OPERATIONS[operation], _TYPES[resource_type])


_OPERATIONS = {op: AclOperation[op.name] for op in Operation}
_TYPES = {t: AclResourceType[t.name] for t in ResourceType}
