"""CreateAcls, DescribeAcls and DeleteAcls through confluent-kafka's AdminClient and raw requests.

Connections are not authenticated yet (issue 13 phase 2), so every client is User:ANONYMOUS;
a broker with ``super.users=User:ANONYMOUS`` lets it manage ACLs. Every wait is bounded.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from tests.integration.rawclient import RawClient, request, request_module

T = 10
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def failure(fut: Any) -> KafkaError:
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=T)
    err = ei.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def create(a: AdminClient, *bindings: AclBinding) -> None:
    for f in a.create_acls(list(bindings), request_timeout=T).values():
        assert f.result(timeout=T) is None


def describe(a: AdminClient, flt: AclBindingFilter) -> set[AclBinding]:
    return set(a.describe_acls(flt, request_timeout=T).result(timeout=T))


ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                       AclOperation.ANY, AclPermissionType.ANY)

READ_ORDERS = AclBinding(ResourceType.TOPIC, "orders", LITERAL, "User:alice", "*",
                         AclOperation.READ, ALLOW)
WRITE_PREFIX = AclBinding(ResourceType.TOPIC, "ord", PREFIXED, "User:bob", "10.0.0.1",
                          AclOperation.WRITE, ALLOW)
DENY_ALL = AclBinding(ResourceType.TOPIC, "*", LITERAL, "User:*", "*", AclOperation.ALL, DENY)
GROUP_READ = AclBinding(ResourceType.GROUP, "workers", LITERAL, "User:alice", "*",
                        AclOperation.READ, ALLOW)
CLUSTER_ALTER = AclBinding(ResourceType.BROKER, "kafka-cluster", LITERAL, "User:ops", "*",
                           AclOperation.ALTER, ALLOW)


def raw_describe_all(bootstrap: str) -> Any:
    with RawClient(bootstrap) as c:
        return c.call(29, 3, request(29, 3, resource_type_filter=1, resource_name_filter=None,
                                     pattern_type_filter=1, principal_filter=None,
                                     host_filter=None, operation=1, permission_type=1))


def start_with_acls(b: Any, **extra: str) -> None:
    b.overrides.update({"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS",
                        **extra})
    b.start()


def test_create_describe_delete(fresh_broker) -> None:
    start_with_acls(fresh_broker)
    a = admin(fresh_broker.bootstrap)
    assert describe(a, ANY) == set()
    everything = {READ_ORDERS, WRITE_PREFIX, DENY_ALL, GROUP_READ, CLUSTER_ALTER}
    create(a, *everything)
    create(a, READ_ORDERS)  # creating an existing ACL succeeds
    assert describe(a, ANY) == everything

    topic_acls = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert describe(a, topic_acls) == {READ_ORDERS, WRITE_PREFIX, DENY_ALL}
    # MATCH: every ACL that applies to topic "orders" (literal, wildcard, prefix)
    match_orders = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH,
                                    None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert describe(a, match_orders) == {READ_ORDERS, WRITE_PREFIX, DENY_ALL}
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                    "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    assert describe(a, by_principal) == {READ_ORDERS, GROUP_READ}

    denies = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, DENY)
    prefixed = AclBindingFilter(ResourceType.TOPIC, "ord", PREFIXED, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    futures = a.delete_acls([denies, prefixed], request_timeout=T)
    assert set(futures[denies].result(timeout=T)) == {DENY_ALL}
    assert set(futures[prefixed].result(timeout=T)) == {WRITE_PREFIX}
    assert describe(a, ANY) == {READ_ORDERS, GROUP_READ, CLUSTER_ALTER}

    # the file on disk is what the broker answers with
    stored = json.loads((fresh_broker.data_dir / "acls.json").read_text())["acls"]
    assert len(stored) == 3


def test_invalid_acls_are_refused_one_by_one(fresh_broker) -> None:
    start_with_acls(fresh_broker)
    bad_cluster = AclBinding(ResourceType.BROKER, "my-cluster", LITERAL, "User:ops", "*",
                             AclOperation.ALTER, ALLOW)
    bad_principal = AclBinding(ResourceType.TOPIC, "t", LITERAL, "alice", "*",
                               AclOperation.READ, ALLOW)
    m = request_module(30, 3)
    with RawClient(fresh_broker.bootstrap) as c:
        row = dict(host="*", operation=3, permission_type=3)
        resp = c.call(30, 3, request(30, 3, creations=(
            m.AclCreation(resource_type=4, resource_name="my-cluster", resource_pattern_type=3,
                          principal="User:ops", **row),
            m.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                          principal="alice", **row),
            m.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=2,
                          principal="User:a", **row),
            m.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                          principal="User:a", **{**row, "operation": 99}),
            m.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                          principal="User:a", **row),
        )))
    codes = [r.error_code for r in resp.results]
    assert codes == [ErrorCode.invalid_request] * 4 + [ErrorCode.none]
    messages = [r.error_message for r in resp.results]
    assert "only valid name for the CLUSTER resource is 'kafka-cluster'" in messages[0]
    assert "Type:name" in messages[1]
    assert "MATCH is only valid in filters" in messages[2]
    assert "operation UNKNOWN" in messages[3]
    assert messages[4] is None
    # and through the admin client: each binding's future fails on its own
    a = admin(fresh_broker.bootstrap)
    futures = a.create_acls([bad_cluster, bad_principal, READ_ORDERS], request_timeout=T)
    assert failure(futures[bad_cluster]).code() == KafkaError.INVALID_REQUEST
    assert failure(futures[bad_principal]).code() == KafkaError.INVALID_REQUEST
    assert futures[READ_ORDERS].result(timeout=T) is None


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version_round_trips(fresh_broker, version: int) -> None:
    start_with_acls(fresh_broker)
    m = request_module(30, version)
    with RawClient(fresh_broker.bootstrap) as c:
        resp = c.call(30, version, request(30, version, creations=(m.AclCreation(
            resource_type=3, resource_name="g", resource_pattern_type=4, principal="User:a",
            host="*", operation=8, permission_type=3),)))
        assert [r.error_code for r in resp.results] == [ErrorCode.none]
        described = c.call(29, version, request(
            29, version, resource_type_filter=1, resource_name_filter=None,
            pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
            permission_type=1))
        assert described.error_code == ErrorCode.none
        assert [(r.resource_type, r.resource_name, r.pattern_type,
                 [(d.principal, d.host, d.operation, d.permission_type) for d in r.acls])
                for r in described.resources] == [(3, "g", 4, [("User:a", "*", 8, 3)])]
        dm = request_module(31, version)
        deleted = c.call(31, version, request(31, version, filters=(dm.DeleteAclsFilter(
            resource_type_filter=3, resource_name_filter="g", pattern_type_filter=4,
            principal_filter=None, host_filter=None, operation=1, permission_type=1),)))
        (result,) = deleted.filter_results
        assert result.error_code == ErrorCode.none
        assert [(x.resource_name, x.principal) for x in result.matching_acls] == [("g", "User:a")]


def test_without_an_authorizer_acls_are_security_disabled(broker) -> None:
    a = admin(broker.bootstrap)
    (f,) = a.create_acls([READ_ORDERS], request_timeout=T).values()
    assert failure(f).code() == KafkaError.SECURITY_DISABLED
    (f,) = a.delete_acls([ANY], request_timeout=T).values()
    assert failure(f).code() == KafkaError.SECURITY_DISABLED
    # librdkafka drops DescribeAcls' error code (an empty listing), so read it raw
    assert describe(a, ANY) == set()
    resp = raw_describe_all(broker.bootstrap)
    assert resp.error_code == ErrorCode.security_disabled
    assert "authorizer.class.name" in resp.error_message


def test_managing_acls_needs_cluster_alter_and_describe(fresh_broker) -> None:
    # allow.everyone: with no ACL on the cluster, anonymous may manage ACLs ...
    fresh_broker.overrides.update({"authorizer.class.name": STANDARD,
                                   "allow.everyone.if.no.acl.found": "true"})
    fresh_broker.start()
    a = admin(fresh_broker.bootstrap)
    create(a, CLUSTER_ALTER)
    # ... until an ACL names the cluster: now only User:ops may
    (f,) = a.create_acls([READ_ORDERS], request_timeout=T).values()
    err = failure(f)
    assert err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert "User:ANONYMOUS" in err.str() and "ALTER on the CLUSTER" in err.str()
    resp = raw_describe_all(fresh_broker.bootstrap)
    assert resp.error_code == ErrorCode.cluster_authorization_failed
    assert "needs DESCRIBE on the CLUSTER" in resp.error_message and resp.resources == ()
    (f,) = a.delete_acls([ANY], request_timeout=T).values()
    assert failure(f).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_acls_survive_sigkill_and_restart(fresh_broker) -> None:
    b = fresh_broker
    start_with_acls(b)
    a = admin(b.bootstrap)
    create(a, READ_ORDERS, WRITE_PREFIX, DENY_ALL)
    b.kill()  # the answer came after the fsync: nothing may be lost
    b.start()
    a = admin(b.bootstrap)
    assert describe(a, ANY) == {READ_ORDERS, WRITE_PREFIX, DENY_ALL}
    (f,) = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, "*", LITERAL, None, None,
                                           AclOperation.ANY, AclPermissionType.ANY)],
                         request_timeout=T).values()
    assert set(f.result(timeout=T)) == {DENY_ALL}
    b.kill()
    b.start()
    assert describe(admin(b.bootstrap), ANY) == {READ_ORDERS, WRITE_PREFIX}


def test_an_unknown_authorizer_class_stops_the_broker(fresh_broker) -> None:
    fresh_broker.overrides["authorizer.class.name"] = "com.example.MyAuthorizer"
    with pytest.raises(RuntimeError, match="is not an authorizer Shoal provides"):
        fresh_broker.start()


def test_a_corrupt_acl_file_stops_the_broker_with_a_clear_error(fresh_broker) -> None:
    fresh_broker.data_dir.mkdir(parents=True)
    (fresh_broker.data_dir / "acls.json").write_text('{"version": 1, "acls": [')
    with pytest.raises(RuntimeError, match="could not start: .*acls.json is not valid JSON"):
        start_with_acls(fresh_broker)
