"""Kafka's ACL model (protocol/acl_types.py): filter matching as DescribeAcls/DeleteAcls select,
and the validation CreateAcls applies."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from protocol.acl_types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_problem,
    filter_problem,
    from_code,
    operations_bitfield,
)

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType


def b(name: str = "orders", pattern: PatternType = Pat.LITERAL, *, rtype: ResourceType = Res.TOPIC,
      principal: str = "User:alice", host: str = "*", op: AclOperation = Op.READ,
      perm: AclPermissionType = Perm.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


FILTER_CASES = [
    ("match-all", AclBindingFilter(), b(), True),
    ("resource-type", AclBindingFilter(resource_type=Res.GROUP), b(), False),
    ("name-any-pattern-exact", AclBindingFilter(name="orders"), b(), True),
    ("name-any-pattern-prefixed-same-name", AclBindingFilter(name="orders"),
     b(pattern=Pat.PREFIXED), True),
    ("name-any-pattern-is-not-a-prefix-match", AclBindingFilter(name="orders"),
     b("ord", Pat.PREFIXED), False),
    ("name-any-pattern-does-not-expand-wildcard", AclBindingFilter(name="orders"), b("*"), False),
    ("literal-filter-exact", AclBindingFilter(name="orders", pattern_type=Pat.LITERAL), b(), True),
    ("literal-filter-skips-prefixed", AclBindingFilter(pattern_type=Pat.LITERAL),
     b(pattern=Pat.PREFIXED), False),
    ("prefixed-filter-exact-name-only", AclBindingFilter(name="ord", pattern_type=Pat.PREFIXED),
     b("ord", Pat.PREFIXED), True),
    ("prefixed-filter-no-prefix-expansion",
     AclBindingFilter(name="orders", pattern_type=Pat.PREFIXED), b("ord", Pat.PREFIXED), False),
    ("match-literal", AclBindingFilter(name="orders", pattern_type=Pat.MATCH), b(), True),
    ("match-wildcard", AclBindingFilter(name="orders", pattern_type=Pat.MATCH), b("*"), True),
    ("match-prefix", AclBindingFilter(name="orders", pattern_type=Pat.MATCH),
     b("ord", Pat.PREFIXED), True),
    ("match-not-longer-prefix", AclBindingFilter(name="orders", pattern_type=Pat.MATCH),
     b("orders-x", Pat.PREFIXED), False),
    ("match-not-other-literal", AclBindingFilter(name="orders", pattern_type=Pat.MATCH),
     b("ord"), False),
    ("match-without-name-is-all", AclBindingFilter(pattern_type=Pat.MATCH),
     b("ord", Pat.PREFIXED), True),
    ("match-respects-type", AclBindingFilter(Res.GROUP, "orders", Pat.MATCH), b("*"), False),
    ("principal", AclBindingFilter(principal="User:bob"), b(), False),
    ("principal-exact-not-wildcard", AclBindingFilter(principal="User:alice"),
     b(principal="User:*"), False),
    ("host", AclBindingFilter(host="10.0.0.1"), b(), False),
    ("host-star-literal", AclBindingFilter(host="*"), b(), True),
    ("operation", AclBindingFilter(operation=Op.WRITE), b(), False),
    ("operation-no-implication", AclBindingFilter(operation=Op.DESCRIBE), b(), False),
    ("operation-all-is-literal", AclBindingFilter(operation=Op.ALL), b(op=Op.ALL), True),
    ("permission", AclBindingFilter(permission=Perm.DENY), b(), False),
    ("everything-given", AclBindingFilter(Res.TOPIC, "orders", Pat.LITERAL, "User:alice", "*",
                                          Op.READ, Perm.ALLOW), b(), True),
]


@pytest.mark.parametrize("flt,binding,expected", [c[1:] for c in FILTER_CASES],
                         ids=[c[0] for c in FILTER_CASES])
def test_filter_matches(flt: AclBindingFilter, binding: AclBinding, expected: bool) -> None:
    assert flt.matches(binding) is expected


VALIDATION_CASES = [
    ("unknown-resource-type", b(rtype=Res.UNKNOWN), "resource type UNKNOWN"),
    ("any-resource-type", b(rtype=Res.ANY), "resource type ANY"),
    ("match-pattern", b(pattern=Pat.MATCH), "pattern type MATCH is only valid in filters"),
    ("any-pattern", b(pattern=Pat.ANY), "pattern type ANY"),
    ("unknown-pattern", b(pattern=Pat.UNKNOWN), "pattern type UNKNOWN"),
    ("any-operation", b(op=Op.ANY), "operation ANY"),
    ("unknown-operation", b(op=Op.UNKNOWN), "operation UNKNOWN"),
    ("any-permission", b(perm=Perm.ANY), "permission type ANY"),
    ("empty-literal-name", b(""), "resource name is empty"),
    ("empty-prefix", b("", Pat.PREFIXED), "resource name is empty"),
    ("cluster-name", b("my-cluster", rtype=Res.CLUSTER), "only valid name for the CLUSTER"),
    ("principal-without-type", b(principal="alice"), "not of the form Type:name"),
    ("principal-empty-name", b(principal="User:"), "not of the form Type:name"),
    ("principal-empty", b(principal=""), "principal is empty"),
]


@pytest.mark.parametrize("binding,message", [c[1:] for c in VALIDATION_CASES],
                         ids=[c[0] for c in VALIDATION_CASES])
def test_invalid_bindings(binding: AclBinding, message: str) -> None:
    problem = binding_problem(binding)
    assert problem is not None
    assert problem[0] == ErrorCode.invalid_request
    assert message in problem[1]


@pytest.mark.parametrize("binding", [
    b(), b("*"), b("ord", Pat.PREFIXED), b("*", Pat.PREFIXED),
    b("kafka-cluster", rtype=Res.CLUSTER, op=Op.ALTER), b(principal="User:*"),
    b(principal="User:CN=alice,OU=x"), b(op=Op.ALL, perm=Perm.DENY), b(rtype=Res.USER),
], ids=["literal", "wildcard", "prefixed", "prefixed-star", "cluster", "wildcard-principal",
        "dn-principal", "deny-all", "user-resource"])
def test_valid_bindings(binding: AclBinding) -> None:
    assert binding_problem(binding) is None


def test_filter_with_unknown_codes_is_refused() -> None:
    assert filter_problem(AclBindingFilter()) is None
    for flt in (AclBindingFilter(resource_type=Res.UNKNOWN),
                AclBindingFilter(pattern_type=Pat.UNKNOWN),
                AclBindingFilter(operation=Op.UNKNOWN),
                AclBindingFilter(permission=Perm.UNKNOWN)):
        problem = filter_problem(flt)
        assert problem is not None and problem[0] == ErrorCode.invalid_request


def test_wire_codes_are_kafkas() -> None:
    assert [int(x) for x in (Res.TOPIC, Res.GROUP, Res.CLUSTER, Res.TRANSACTIONAL_ID,
                             Res.DELEGATION_TOKEN, Res.USER)] == [2, 3, 4, 5, 6, 7]
    assert [int(x) for x in (Pat.ANY, Pat.MATCH, Pat.LITERAL, Pat.PREFIXED)] == [1, 2, 3, 4]
    assert [int(x) for x in (Perm.ANY, Perm.DENY, Perm.ALLOW)] == [1, 2, 3]
    assert [int(x) for x in (Op.ALL, Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER,
                             Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                             Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE)] == list(range(2, 13))
    assert from_code(Op, 99) is Op.UNKNOWN and from_code(Res, -1) is Res.UNKNOWN
    assert operations_bitfield([Op.READ, Op.DESCRIBE]) == 0b1_0000_1000
