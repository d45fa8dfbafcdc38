"""broker/authz.py and the request context: the default authorizer refuses CLUSTER_ACTION to
everyone but super.users and is never asked anything else; the ACL seam's answers, bitfields and
by-type checks; refusals audited once per name, rate-limited in the log."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.authz import (
    ANONYMOUS,
    CLUSTER,
    DefaultAuthorizer,
    DenialLog,
    Operation,
    Principal,
    Resource,
    ResourceType,
    parse_super_users,
    refusal,
)
from broker.clock import FakeClock
from broker.config import BrokerConfig, ConfigError
from broker.context import RequestContext
from broker.metrics import LabelledCounter
from protocol.acl_types import AclBinding, AclOperation, AclPermissionType, PatternType
from protocol.acl_types import ResourceType as AclType
from broker.security.authorizer import AclAuthorizer
from broker.security.setup import AclSeam

TOPIC = Resource(ResourceType.TOPIC, "t")


def test_anonymous_clients_may_do_anything_but_cluster_actions() -> None:
    a = DefaultAuthorizer()
    assert not a.authorize(ANONYMOUS, Operation.CLUSTER_ACTION, CLUSTER)
    assert a.authorize(ANONYMOUS, Operation.READ, TOPIC)
    assert a.authorize(ANONYMOUS, Operation.DESCRIBE, CLUSTER)


def test_super_users_may_act_as_the_cluster() -> None:
    a = DefaultAuthorizer(parse_super_users("User:broker; User:ANONYMOUS"))
    assert a.authorize(ANONYMOUS, Operation.CLUSTER_ACTION, CLUSTER)
    assert a.authorize(Principal("User", "broker"), Operation.CLUSTER_ACTION, CLUSTER)
    assert not DefaultAuthorizer(parse_super_users("User:broker")).authorize(
        ANONYMOUS, Operation.CLUSTER_ACTION, CLUSTER)


def test_super_users_config_is_empty_by_default_and_validated() -> None:
    assert BrokerConfig().get("super.users") == ""
    assert BrokerConfig({"super.users": "User:a;User:b"}).get("super.users") == "User:a;User:b"
    with pytest.raises(ValueError):
        parse_super_users("ANONYMOUS")
    with pytest.raises(ConfigError, match="Type:name"):
        BrokerConfig({"super.users": "nobody"})


# -- the seam the handlers use (broker/context.py) ------------------------------------------

GROUP = Resource(ResourceType.GROUP, "g")


def _ctx(authorizer: object, principal: Principal = ANONYMOUS) -> RequestContext:
    broker = SimpleNamespace(
        authorizer=authorizer, denials=DenialLog(), clock=FakeClock(),
        metrics=SimpleNamespace(authorization_denied=LabelledCounter(
            "denied_total", "", ("operation", "resource_type"))))
    return RequestContext(broker, 78, 1, 1, "c", "10.0.0.9", 1,  # type: ignore[arg-type]
                          principal)


class Exploding:
    """An authorizer that must not be asked (authorization off answers without it)."""

    enforcing = False

    def authorize(self, *args: object) -> bool:
        raise AssertionError("asked")


def test_authorization_off_never_asks_the_authorizer_but_for_cluster_action() -> None:
    ctx = _ctx(Exploding())
    assert ctx.authorized(Operation.READ, TOPIC)
    assert ctx.denied(Operation.READ, ResourceType.TOPIC, ["a", "b"]) == frozenset()
    with pytest.raises(AssertionError):
        ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER)


def _acl(rtype: AclType, name: str, op: AclOperation,
         permission: AclPermissionType = AclPermissionType.ALLOW,
         pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, "User:ANONYMOUS", "*", op, permission)


def test_denied_asks_each_name_once_and_audits_refusals() -> None:
    acls = AclAuthorizer(acls=[_acl(AclType.TOPIC, "ok", AclOperation.READ)])
    ctx = _ctx(AclSeam(acls))
    assert ctx.denied(Operation.READ, ResourceType.TOPIC, ["ok", "no", "no", "no"]) == {"no"}
    counter = ctx.broker.metrics.authorization_denied
    assert counter.get(("READ", "TOPIC")) == 1
    assert ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, ["x"], audit=False) == {"x"}
    assert counter.get(("DESCRIBE", "TOPIC")) == 0


def test_bitfields_and_by_type_checks() -> None:
    off = DefaultAuthorizer()
    # every CLUSTER operation but CLUSTER_ACTION (9): CREATE 5, ALTER 7, DESCRIBE 8,
    # DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
    assert off.authorized_operations(ANONYMOUS, CLUSTER) == sum(
        1 << op for op in (5, 7, 8, 10, 11, 12))
    assert off.authorized_operations(ANONYMOUS, GROUP) == sum(1 << op for op in (3, 6, 8, 10, 11))
    acls = AclSeam(AclAuthorizer(acls=[
        _acl(AclType.GROUP, "g", AclOperation.READ),
        _acl(AclType.TOPIC, "t-", AclOperation.WRITE, pattern=PatternType.PREFIXED)]))
    assert acls.authorized_operations(ANONYMOUS, GROUP) == (1 << 3) | (1 << 8)
    assert acls.authorize_by_resource_type(ANONYMOUS, Operation.WRITE, ResourceType.TOPIC)
    assert not acls.authorize_by_resource_type(ANONYMOUS, Operation.READ, ResourceType.TOPIC)


def test_denial_log_is_rate_limited_per_key() -> None:
    d = DenialLog(interval_ms=10_000, max_keys=2)
    assert d.record("a", 0) == 0  # the first is logged
    assert d.record("a", 5_000) is None
    assert d.record("a", 9_999) is None
    assert d.record("a", 10_000) == 2  # one line, with the two not logged
    assert d.record("b", 10_001) == 0
    assert d.record("c", 10_002) == 0  # table full: starts over
    assert d.record("a", 10_003) == 0


def test_refusal_messages_say_what_to_grant() -> None:
    text = refusal(ANONYMOUS, Operation.READ, Resource(ResourceType.TOPIC, "orders"), "10.0.0.9")
    assert text.startswith("User:ANONYMOUS from 10.0.0.9 is not authorized to READ topic 'orders'")
    assert "'--allow-principal User:ANONYMOUS --operation READ --topic orders'" in text


def test_bench_z_acl_set_allows_the_benchmark_and_has_1000_acls() -> None:
    from bench.authz_overhead import ACLS, bench_acls

    acls = bench_acls()
    assert len(set(acls)) == ACLS
    seam = AclSeam(AclAuthorizer(acls=acls))
    topic, group = Resource(ResourceType.TOPIC, "bench-1-p1"), Resource(ResourceType.GROUP,
                                                                         "bench-1-b1")
    for op in (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE):
        assert seam.authorize(ANONYMOUS, op, topic)
    for op in (Operation.READ, Operation.DESCRIBE, Operation.ALTER_CONFIGS):
        assert seam.authorize(ANONYMOUS, op, group)
    assert not seam.authorize(ANONYMOUS, Operation.READ, Resource(ResourceType.TOPIC, "other"))


def test_a_null_resource_name_is_refused_not_raised() -> None:
    """A null name from the wire (a ShareFetch GroupId, say) against PREFIXED ACLs: refused,
    never a TypeError that would drop the connection."""
    seam = AclSeam(AclAuthorizer(acls=[
        _acl(AclType.GROUP, "g-", AclOperation.READ, pattern=PatternType.PREFIXED)]))
    null_group = Resource(ResourceType.GROUP, None)  # type: ignore[arg-type]
    assert not seam.authorize(ANONYMOUS, Operation.READ, null_group)
    assert seam.authorized_operations(ANONYMOUS, null_group) == 0
    assert seam.authorize(ANONYMOUS, Operation.READ, Resource(ResourceType.GROUP, "g-1"))
