"""Kafka's ACL model: resource patterns, access-control entries, bindings and filters (sans-IO).

An ACL *binding* pairs a resource pattern (resource type, name, LITERAL or PREFIXED) with an
entry (principal, host, operation, ALLOW or DENY). The enum codes are Kafka's wire codes
(``org.apache.kafka.common.acl.AclOperation``, ``...resource.ResourceType``, ``PatternType``,
``AclPermissionType``): CreateAcls/DescribeAcls/DeleteAcls carry them as int8, and an
AuthorizedOperations field sets bit ``1 << operation code`` for each allowed operation.

Rules kept here, as Kafka has them:

* A LITERAL pattern named ``*`` is the wildcard: it matches every resource of its type. A
  PREFIXED pattern matches names starting with its name; PREFIXED ``*`` is *not* a wildcard
  (it matches names that start with the character ``*``).
* A filter (DescribeAcls, DeleteAcls) matches a binding field by field; a null name, principal
  or host and the ANY codes match everything. Pattern type ANY matches LITERAL and PREFIXED
  bindings with exactly the given name; MATCH matches every binding that would apply to a
  resource of that name: LITERAL with the name, LITERAL ``*``, and PREFIXED with a prefix of it.
* A binding that CreateAcls accepts has concrete enums (no UNKNOWN, no ANY, pattern LITERAL or
  PREFIXED), a non-empty name (``kafka-cluster`` for CLUSTER) and a ``Type:name`` principal.
  Problems are returned as ``(ErrorCode, message)`` data, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"

E = TypeVar("E", bound=IntEnum)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    MATCH = 2  # filters only
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


def from_code(enum: type[E], code: int) -> E:
    """The member with wire code ``code``; codes this broker does not know read as UNKNOWN (as
    Kafka's ``fromCode``), so a newer client's value is refused instead of crashing."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


# The operations each concrete resource type supports (Kafka ``AclEntry.supportedOperations``);
# an AuthorizedOperations answer only ever has these bits.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

# Operations that are real actions (what authorize() is asked about, and what ALL grants).
CONCRETE_OPERATIONS = tuple(op for op in AclOperation if op >= AclOperation.READ)

# An ALLOW for one of these also allows DESCRIBE / DESCRIBE_CONFIGS. The implication only
# widens ALLOW entries: DENY READ does not deny DESCRIBE (Kafka ``StandardAuthorizerData``).
IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER, AclOperation.DESCRIBE})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS})


def operations_bitfield(ops: Iterable[AclOperation]) -> int:
    """An AuthorizedOperations value: bit ``1 << code`` for each operation."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits


def covered_operations(operation: AclOperation, permission: AclPermissionType
                       ) -> frozenset[AclOperation]:
    """The concrete operations an entry with ``operation`` and ``permission`` decides."""
    if operation == AclOperation.ALL:
        return frozenset(CONCRETE_OPERATIONS)
    covered = {operation}
    if permission == AclPermissionType.ALLOW:
        if operation in IMPLIES_DESCRIBE:
            covered.add(AclOperation.DESCRIBE)
        if operation in IMPLIES_DESCRIBE_CONFIGS:
            covered.add(AclOperation.DESCRIBE_CONFIGS)
    return frozenset(covered)


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access-control entry. Ordered for stable listings."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's pattern covers the resource ``(resource_type, name)``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.name)

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} {self.operation.name} from host "
                f"{self.host} on {self.resource_type.name}:{self.pattern_type.name}:{self.name}")


def binding_doc(b: AclBinding) -> dict[str, str]:
    """A binding as a JSON object with enum names, not codes (``acls.json`` and the cluster
    metadata store hold this form)."""
    return {"resource_type": b.resource_type.name, "name": b.name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission": b.permission.name}


def binding_from_doc(doc: Mapping[str, Any]) -> AclBinding:
    """The inverse of ``binding_doc`` (the binding is not validated: see ``binding_problem``).

    Raises:
        KeyError: a field is missing or an enum name is unknown.
        TypeError: ``doc`` is not a mapping of those fields.
    """
    return AclBinding(ResourceType[doc["resource_type"]], str(doc["name"]),
                      PatternType[doc["pattern_type"]], str(doc["principal"]), str(doc["host"]),
                      AclOperation[doc["operation"]], AclPermissionType[doc["permission"]])


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select. ``None`` name/principal/host match anything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        """Whether ``b`` is selected (Kafka ``AclBindingFilter.matches``)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if (self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
                and self.pattern_type != b.pattern_type):
            return False
        if self.name is not None:
            if self.pattern_type == PatternType.MATCH:
                if not b.applies_to(b.resource_type, self.name):
                    return False
            elif self.name != b.name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == b.permission


ANY_FILTER = AclBindingFilter()

Problem = tuple[ErrorCode, str]


def principal_problem(principal: str | None) -> str | None:
    """Why ``principal`` is not of the form ``Type:name`` (``User:alice``), or None."""
    if not principal:
        return "the principal is empty; expected Type:name, e.g. User:alice"
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return f"principal {principal!r} is not of the form Type:name, e.g. User:alice"
    return None


def binding_problem(b: AclBinding) -> Problem | None:
    """Why CreateAcls must refuse ``b`` (INVALID_REQUEST and a message), or None if it is valid.

    Kafka checks the same in ``AclControlManager.validateNewAcl`` and ``AclApis``; the principal
    format check is Shoal's (Kafka stores such an ACL, which can then never match).
    """
    def invalid(message: str) -> Problem:
        return ErrorCode.invalid_request, f"ACL refused: {message}"

    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return invalid(f"resource type {b.resource_type.name} is not a concrete type; use one of "
                       "TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return invalid(f"pattern type {b.pattern_type.name} is only valid in filters; an ACL is "
                       "LITERAL or PREFIXED")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return invalid(f"operation {b.operation.name} is only valid in filters")
    if b.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return invalid(f"permission type {b.permission.name} is not ALLOW or DENY")
    if not b.name:
        return invalid("the resource name is empty")
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return invalid(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME!r}, "
                       f"not {b.name!r}")
    problem = principal_problem(b.principal)
    if problem:
        return invalid(problem)
    return None


def filter_problem(f: AclBindingFilter) -> Problem | None:
    """Why DescribeAcls/DeleteAcls must refuse ``f`` (an UNKNOWN code), or None."""
    for field, value in (("resource type", f.resource_type), ("pattern type", f.pattern_type),
                         ("operation", f.operation), ("permission type", f.permission)):
        if value == 0:  # UNKNOWN in every enum
            return (ErrorCode.invalid_request,
                    f"ACL filter refused: its {field} is UNKNOWN (a code this broker does not "
                    "know)")
    return None
