"""The ACL authorizer against Kafka's StandardAuthorizer semantics (broker/security/authorizer.py).

Table-driven cases name the rule each one pins; a Hypothesis property checks the indexed
authorizer against a naive scan of the rules over random ACL sets and queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from protocol.acl_types import (
    CLUSTER_NAME,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    operations_bitfield,
)
from broker.security.acl_store import decode, encode
from broker.security.authorizer import AclAuthorizer, canonical_host, parse_super_users

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALLOW, DENY = Perm.ALLOW, Perm.DENY
LIT, PRE = Pat.LITERAL, Pat.PREFIXED
TOPIC, GROUP, CLUSTER = Res.TOPIC, Res.GROUP, Res.CLUSTER

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, op: AclOperation, perm: AclPermissionType = ALLOW, *,
        principal: str = ALICE, host: str = "*", pattern: PatternType = LIT,
        rtype: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


@dataclass(frozen=True)
class Case:
    id: str
    acls: tuple[AclBinding, ...]
    op: AclOperation
    name: str = "orders"
    expected: bool = True
    principal: str = ALICE
    host: str = HOST
    rtype: ResourceType = TOPIC
    allow_everyone: bool = False
    super_users: tuple[str, ...] = ()


CASES = [
    # no ACL at all on the resource
    Case("no-acls-denies", (), Op.READ, expected=False),
    Case("no-acls-allow-everyone", (), Op.READ, allow_everyone=True),
    Case("allow-everyone-not-when-another-principal-has-acls",
         (acl("orders", Op.READ, principal=BOB),), Op.READ, expected=False, allow_everyone=True),
    Case("allow-everyone-not-when-a-wildcard-acl-exists",
         (acl("*", Op.WRITE, principal=BOB),), Op.READ, expected=False, allow_everyone=True),
    Case("allow-everyone-not-when-a-prefix-covers-it",
         (acl("ord", Op.WRITE, principal=BOB, pattern=PRE),), Op.READ, expected=False,
         allow_everyone=True),
    Case("allow-everyone-when-acls-are-on-other-resources",
         (acl("payments", Op.READ, principal=BOB), acl("orders", Op.READ, rtype=GROUP)),
         Op.READ, allow_everyone=True),
    Case("literal-prefix-of-name-is-not-a-match",
         (acl("ord", Op.READ),), Op.READ, expected=False),
    Case("literal-that-does-not-cover-counts-as-no-acl", (acl("ord", Op.READ, principal=BOB),),
         Op.READ, allow_everyone=True),
    # literal, wildcard, prefixed
    Case("literal-allow", (acl("orders", Op.READ),), Op.READ),
    Case("literal-other-name", (acl("orders2", Op.READ),), Op.READ, expected=False),
    Case("wildcard-resource", (acl("*", Op.READ),), Op.READ),
    Case("wildcard-resource-other-type", (acl("*", Op.READ, rtype=GROUP),), Op.READ,
         expected=False),
    Case("prefixed-allow", (acl("ord", Op.READ, pattern=PRE),), Op.READ),
    Case("prefixed-whole-name", (acl("orders", Op.READ, pattern=PRE),), Op.READ),
    Case("prefixed-longer-than-name", (acl("orders-", Op.READ, pattern=PRE),), Op.READ,
         expected=False),
    Case("prefixed-star-is-not-a-wildcard", (acl("*", Op.READ, pattern=PRE),), Op.READ,
         expected=False),
    Case("prefixed-star-matches-star-names", (acl("*", Op.READ, pattern=PRE),), Op.READ,
         name="*x"),
    Case("resource-named-star-matches-wildcard", (acl("*", Op.READ),), Op.READ, name="*"),
    # principal and host
    Case("other-principal", (acl("orders", Op.READ, principal=BOB),), Op.READ, expected=False),
    Case("wildcard-principal", (acl("orders", Op.READ, principal=WILDCARD_PRINCIPAL),),
         Op.READ),
    # Kafka checks the ACL principal against {caller, User:*}, whatever the caller's type.
    Case("wildcard-principal-any-principal-type",
         (acl("orders", Op.READ, principal=WILDCARD_PRINCIPAL),), Op.READ,
         principal="Group:ops"),
    Case("principal-type-matters", (acl("orders", Op.READ, principal="Group:alice"),),
         Op.READ, expected=False),
    Case("host-match", (acl("orders", Op.READ, host=HOST),), Op.READ),
    Case("host-ipv6-long-form", (acl("orders", Op.READ, host="0:0:0:0:0:0:0:1"),), Op.READ,
         host="::1"),
    Case("host-mismatch", (acl("orders", Op.READ, host="10.0.0.2"),), Op.READ, expected=False),
    # DENY wins
    Case("deny-wins-same-pattern", (acl("orders", Op.READ), acl("orders", Op.READ, DENY)),
         Op.READ, expected=False),
    Case("deny-wildcard-over-literal-allow", (acl("orders", Op.READ), acl("*", Op.READ, DENY)),
         Op.READ, expected=False),
    Case("deny-prefix-over-literal-allow",
         (acl("orders", Op.READ), acl("or", Op.READ, DENY, pattern=PRE)), Op.READ,
         expected=False),
    Case("deny-wildcard-principal", (acl("orders", Op.READ),
                                     acl("orders", Op.READ, DENY, principal=WILDCARD_PRINCIPAL)),
         Op.READ, expected=False),
    Case("deny-from-a-host", (acl("orders", Op.READ), acl("orders", Op.READ, DENY, host=HOST)),
         Op.READ, expected=False),
    Case("deny-other-host-does-not-apply",
         (acl("orders", Op.READ), acl("orders", Op.READ, DENY, host="10.9.9.9")), Op.READ),
    Case("deny-other-op-does-not-apply", (acl("orders", Op.READ), acl("orders", Op.WRITE, DENY)),
         Op.READ),
    Case("deny-all", (acl("orders", Op.READ), acl("orders", Op.ALL, DENY)), Op.READ,
         expected=False),
    Case("deny-only-denies", (acl("orders", Op.WRITE, DENY),), Op.READ, expected=False,
         allow_everyone=True),
    # implied operations
    Case("read-implies-describe", (acl("orders", Op.READ),), Op.DESCRIBE),
    Case("write-implies-describe", (acl("orders", Op.WRITE),), Op.DESCRIBE),
    Case("delete-implies-describe", (acl("orders", Op.DELETE),), Op.DESCRIBE),
    Case("alter-implies-describe", (acl("orders", Op.ALTER),), Op.DESCRIBE),
    Case("create-does-not-imply-describe", (acl("orders", Op.CREATE),), Op.DESCRIBE,
         expected=False),
    Case("alter-configs-implies-describe-configs", (acl("orders", Op.ALTER_CONFIGS),),
         Op.DESCRIBE_CONFIGS),
    Case("describe-configs-does-not-imply-describe", (acl("orders", Op.DESCRIBE_CONFIGS),),
         Op.DESCRIBE, expected=False),
    Case("describe-does-not-imply-read", (acl("orders", Op.DESCRIBE),), Op.READ, expected=False),
    Case("read-does-not-imply-write", (acl("orders", Op.READ),), Op.WRITE, expected=False),
    Case("all-implies-everything", (acl("orders", Op.ALL),), Op.ALTER_CONFIGS),
    Case("deny-read-does-not-deny-describe",
         (acl("orders", Op.READ, DENY), acl("orders", Op.DESCRIBE)), Op.DESCRIBE),
    Case("deny-describe-denies-despite-read",
         (acl("orders", Op.READ), acl("orders", Op.DESCRIBE, DENY)), Op.DESCRIBE,
         expected=False),
    # super users and the cluster
    Case("super-user-beats-deny", (acl("orders", Op.ALL, DENY),), Op.READ,
         super_users=(ALICE,)),
    Case("super-user-without-acls", (), Op.ALTER, super_users=(ALICE,)),
    Case("cluster-alter", (acl(CLUSTER_NAME, Op.ALTER, rtype=CLUSTER),), Op.ALTER,
         name=CLUSTER_NAME, rtype=CLUSTER),
    Case("cluster-alter-implies-describe", (acl(CLUSTER_NAME, Op.ALTER, rtype=CLUSTER),),
         Op.DESCRIBE, name=CLUSTER_NAME, rtype=CLUSTER),
    Case("cluster-describe-is-not-alter", (acl(CLUSTER_NAME, Op.DESCRIBE, rtype=CLUSTER),),
         Op.ALTER, name=CLUSTER_NAME, rtype=CLUSTER, expected=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_authorize(case: Case) -> None:
    authorizer = AclAuthorizer(case.super_users, case.allow_everyone, case.acls)
    got = authorizer.authorize(case.principal, case.host, case.op, case.rtype, case.name)
    assert got is case.expected
    assert naive_authorize(case.acls, set(case.super_users), case.allow_everyone,
                           case.principal, case.host, case.op, case.rtype,
                           case.name) is case.expected
    # asked twice: the cached answer is the same
    assert authorizer.authorize(case.principal, case.host, case.op, case.rtype,
                                case.name) is case.expected


def test_changes_invalidate_the_cache() -> None:
    a = AclAuthorizer()
    assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    a.apply(a.plan_create([acl("orders", Op.READ)]))
    assert a.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    a.apply(a.plan_create([acl("ord", Op.READ, DENY, pattern=PRE)]))
    assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    a.apply(a.plan_delete([AclBindingFilter(pattern_type=PRE)]))
    assert a.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    a.apply(a.plan_delete([AclBindingFilter()]))
    assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert len(a) == 0


def test_plans_do_not_change_anything_until_applied() -> None:
    a = AclAuthorizer()
    change = a.plan_create([acl("orders", Op.READ)])
    assert len(a) == 0 and not a.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert a.after(change) == {acl("orders", Op.READ)}


def test_creating_an_existing_acl_succeeds_and_changes_nothing() -> None:
    a = AclAuthorizer(acls=[acl("orders", Op.READ)])
    change = a.plan_create([acl("orders", Op.READ), acl("orders", Op.READ)])
    assert change.empty and [r.error for r in change.results] == [ErrorCode.none] * 2


def test_delete_reports_an_acl_under_every_filter_that_matches_it() -> None:
    a = AclAuthorizer(acls=[acl("orders", Op.READ), acl("orders", Op.WRITE)])
    change = a.plan_delete([AclBindingFilter(operation=Op.READ),
                            AclBindingFilter(name="orders"),
                            AclBindingFilter(resource_type=Res.UNKNOWN)])
    assert [len(r.matched) for r in change.results] == [1, 2, 0]
    assert change.results[2].error == ErrorCode.invalid_request
    assert change.removed == {acl("orders", Op.READ), acl("orders", Op.WRITE)}


# ------------------------------------------------------------------- authorized operations

def test_authorized_operations_bitfield_uses_kafka_bit_layout() -> None:
    a = AclAuthorizer(acls=[acl("orders", Op.READ), acl("orders", Op.ALTER_CONFIGS)])
    bits = a.authorized_operations(ALICE, HOST, TOPIC, "orders")
    assert bits == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)  # READ DESCRIBE D_CONFIGS A_CONFIGS
    assert a.authorized_operations(ALICE, HOST, TOPIC, "orders", [Op.READ, Op.WRITE]) == 1 << 3


def test_super_user_gets_every_supported_operation() -> None:
    a = AclAuthorizer(super_users=[ALICE])
    assert a.authorized_operations(ALICE, HOST, GROUP, "g") == operations_bitfield(
        [Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
    assert a.authorized_operations(ALICE, HOST, CLUSTER, CLUSTER_NAME) == sum(
        1 << c for c in (5, 7, 8, 9, 10, 11, 12))


# ----------------------------------------------------------------- authorize by resource type

BY_TYPE_CASES = [
    ("nothing", (), False),
    ("literal-allow", (acl("t", Op.WRITE),), True),
    ("all-allow", (acl("t", Op.ALL),), True),
    ("other-op", (acl("t", Op.READ),), False),
    ("literal-denied-literally", (acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)), False),
    ("literal-denied-by-prefix", (acl("tx", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE)),
     False),
    ("prefix-denied-by-shorter-prefix",
     (acl("tx", Op.WRITE, pattern=PRE), acl("t", Op.WRITE, DENY, pattern=PRE)), False),
    ("prefix-not-denied-by-longer-prefix",
     (acl("t", Op.WRITE, pattern=PRE), acl("tx", Op.WRITE, DENY, pattern=PRE)), True),
    ("wildcard-deny", (acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)), False),
    ("one-allow-not-denied-is-enough",
     (acl("a", Op.WRITE), acl("b", Op.WRITE), acl("a", Op.WRITE, DENY)), True),
    ("other-principal", (acl("t", Op.WRITE, principal=BOB),), False),
]


@pytest.mark.parametrize("acls,expected", [(a, e) for _, a, e in BY_TYPE_CASES],
                         ids=[i for i, _, _ in BY_TYPE_CASES])
def test_authorize_by_resource_type(acls: tuple[AclBinding, ...], expected: bool) -> None:
    a = AclAuthorizer(acls=acls)
    assert a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC) is expected


def test_authorize_by_resource_type_super_user_and_allow_everyone() -> None:
    assert AclAuthorizer([ALICE]).authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)
    assert AclAuthorizer((), True).authorize_by_resource_type(ALICE, HOST, Op.WRITE, TOPIC)


# ------------------------------------------------------------------------------ super.users

@pytest.mark.parametrize("value,expected", [
    ("", set()),
    ("User:admin", {"User:admin"}),
    (" User:admin ; User:ops ;", {"User:admin", "User:ops"}),
    ("User:CN=alice,O=x", {"User:CN=alice,O=x"}),
], ids=["empty", "one", "spaces-and-trailing-separator", "dn-with-commas"])
def test_parse_super_users(value: str, expected: set[str]) -> None:
    assert parse_super_users(value) == expected


@pytest.mark.parametrize("value", ["admin", "User:admin;ops", ":x", "User:"],
                         ids=["no-type", "second-bad", "empty-type", "empty-name"])
def test_parse_super_users_rejects_bad_principals(value: str) -> None:
    with pytest.raises(ValueError, match="Type:name"):
        parse_super_users(value)


# ------------------------------------------------------------- property: index == naive scan

def naive_authorize(acls: tuple[AclBinding, ...] | list[AclBinding], super_users: set[str],
                    allow_everyone: bool, principal: str, host: str, op: AclOperation,
                    rtype: ResourceType, name: str) -> bool:
    """The rules of the module docstring, read straight off every ACL."""
    if principal in super_users:
        return True
    applying = [b for b in acls if b.resource_type == rtype and (
        (b.pattern_type == LIT and b.name in (name, "*"))
        or (b.pattern_type == PRE and name.startswith(b.name)))]
    if not applying:
        return allow_everyone
    matching = [b for b in applying
                if b.principal in (principal, WILDCARD_PRINCIPAL)
                and canonical_host(b.host) in ("*", host)
                and _op_matches(b, op)]
    if any(b.permission == DENY for b in matching):
        return False
    return any(b.permission == ALLOW for b in matching)


def _op_matches(b: AclBinding, op: AclOperation) -> bool:
    if b.operation in (Op.ALL, op):
        return True
    if b.permission != ALLOW:
        return False
    return ((op == Op.DESCRIBE and b.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER))
            or (op == Op.DESCRIBE_CONFIGS and b.operation == Op.ALTER_CONFIGS))


NAMES = st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "*", "*a", "orders", "ord"])
PRINCIPALS = st.sampled_from([ALICE, BOB, WILDCARD_PRINCIPAL, "Group:alice"])
HOSTS = st.sampled_from(["*", HOST, "10.0.0.2"])
OPS = st.sampled_from([op for op in Op if op >= Op.ALL])
BINDINGS = st.builds(AclBinding, st.sampled_from([TOPIC, GROUP]), NAMES,
                     st.sampled_from([LIT, PRE]), PRINCIPALS, HOSTS, OPS,
                     st.sampled_from([ALLOW, DENY]))
QUERIES = st.tuples(st.sampled_from([ALICE, BOB, "Group:alice", "User:carol"]),
                    st.sampled_from([HOST, "10.0.0.2"]),
                    st.sampled_from([op for op in Op if op >= Op.READ]),
                    st.sampled_from([TOPIC, GROUP]), NAMES)


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(BINDINGS, max_size=25), removed=st.lists(BINDINGS, max_size=5),
       queries=st.lists(QUERIES, min_size=1, max_size=20), allow_everyone=st.booleans())
def test_index_agrees_with_a_naive_scan(acls: list[AclBinding], removed: list[AclBinding],
                                        queries: list[tuple[str, str, AclOperation,
                                                            ResourceType, str]],
                                        allow_everyone: bool) -> None:
    a = AclAuthorizer((), allow_everyone, acls + removed)
    # removing through the index must leave it as if the ACLs had never been added
    gone = [b for b in removed if b not in acls]
    a.apply(a.plan_delete([AclBindingFilter(b.resource_type, b.name, b.pattern_type,
                                            b.principal, b.host, b.operation, b.permission)
                           for b in gone]))
    assert a.bindings() == set(acls)
    for principal, host, op, rtype, name in queries:
        assert a.authorize(principal, host, op, rtype, name) is naive_authorize(
            acls, set(), allow_everyone, principal, host, op, rtype, name), (
            principal, host, op, rtype, name)


# ------------------------------------------- stateful: changes, durability and rebuild agree

class AclMachine(RuleBasedStateMachine):
    """Random CreateAcls/DeleteAcls sequences. Invariants: the live index answers like a naive
    scan of the expected set, and an authorizer rebuilt from the encoded file equals it."""

    def __init__(self) -> None:
        super().__init__()
        self.live = AclAuthorizer()
        self.expected: set[AclBinding] = set()

    @rule(bindings=st.lists(BINDINGS, min_size=1, max_size=4))
    def create(self, bindings: list[AclBinding]) -> None:
        self.live.apply(self.live.plan_create(bindings))
        self.expected.update(bindings)

    @rule(name=st.none() | NAMES, pattern=st.sampled_from([Pat.ANY, Pat.MATCH, LIT, PRE]),
          principal=st.none() | PRINCIPALS, op=st.sampled_from([Op.ANY, Op.READ, Op.ALL]))
    def delete(self, name: str | None, pattern: PatternType, principal: str | None,
               op: AclOperation) -> None:
        flt = AclBindingFilter(Res.ANY, name, pattern, principal, None, op)
        change = self.live.plan_delete([flt])
        self.live.apply(change)
        self.expected = {b for b in self.expected if not flt.matches(b)}

    @invariant()
    def rebuilt_equals_live(self) -> None:
        rebuilt = AclAuthorizer(acls=decode(encode(self.live.bindings()), "test"))
        assert rebuilt.bindings() == self.live.bindings() == self.expected

    @invariant()
    def index_agrees_with_naive(self) -> None:
        for principal in (ALICE, BOB):
            for name in ("abc", "orders", "*a"):
                for op in (Op.READ, Op.DESCRIBE, Op.WRITE):
                    assert self.live.authorize(principal, HOST, op, TOPIC, name) is (
                        naive_authorize(list(self.expected), set(), False, principal, HOST, op,
                                        TOPIC, name))


TestAclMachine = AclMachine.TestCase
TestAclMachine.settings = settings(max_examples=60, stateful_step_count=15, deadline=None)
