"""ACLs, SCRAM credentials and feature levels on a 3-broker cluster: one source of truth (etcd).

The brokers run Kafka's ACL authorizer (``allow.everyone.if.no.acl.found=true``, so clients of
the PLAINTEXT listener, User:ANONYMOUS, may do what no ACL forbids, including managing ACLs and
credentials) and accept SCRAM-SHA-256 next to PLAIN on their SASL_PLAINTEXT INTERNAL listener.
Requests that must reach one broker in particular go over a raw connection to it; what users
run is confluent-kafka. What a user notices: an ACL or a SCRAM user created through one broker
holds on every broker, each broker lists the same, a deletion anywhere is seen everywhere, and
every broker advertises the same finalized ``share.version``.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from typing import Any

import pytest
import scramp
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from tests.integration.cluster.conftest import Cluster
from tests.integration.rawclient import RawClient, request

T = 30
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SHA256 = "SCRAM-SHA-256"


@pytest.fixture
def cluster_overrides() -> dict[str, str]:
    return {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true",
            "sasl.enabled.mechanisms": f"PLAIN,{SHA256}"}


def _internal(b: Any) -> str:
    """The broker's SASL_PLAINTEXT INTERNAL listener (host:port)."""
    for item in b.overrides["listeners"].split(","):
        name, _, address = item.partition("://")
        if name == "INTERNAL":
            return address
    raise AssertionError("no INTERNAL listener")


def _wait(condition: Any, what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.1)


# -- raw requests to one broker --------------------------------------------------------------

def _topic_error(address: str, topic: str) -> int:
    """Metadata of ``topic`` from this very broker, as User:ANONYMOUS."""
    with RawClient(address) as c:
        m = RawClient.request_module(3, 12)
        md = c.call(3, 12, request(3, 12, topics=(m.MetadataRequestTopic(
            name=topic, topic_id=uuid.UUID(int=0)),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    return int(md.topics[0].error_code)


def _create_acl(address: str, topic: str, operation: int, permission: int) -> list[int]:
    """CreateAcls on this broker: ``permission`` (2 DENY, 3 ALLOW) User:ANONYMOUS
    ``operation`` (8 DESCRIBE) on the LITERAL topic; the per-creation error codes."""
    m = RawClient.request_module(30, 3)
    with RawClient(address, timeout=T) as c:
        resp = c.call(30, 3, request(30, 3, creations=(m.AclCreation(
            resource_type=2, resource_name=topic, resource_pattern_type=3,
            principal="User:ANONYMOUS", host="*", operation=operation,
            permission_type=permission),)))
    return [int(r.error_code) for r in resp.results]


def _delete_acls(address: str) -> int:
    """DeleteAcls of every ACL on this broker; how many it removed."""
    m = RawClient.request_module(31, 3)
    with RawClient(address, timeout=T) as c:
        resp = c.call(31, 3, request(31, 3, filters=(m.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1),)))
    assert [r.error_code for r in resp.filter_results] == [ErrorCode.none]
    return len(resp.filter_results[0].matching_acls)


def _describe_acls(address: str) -> set[tuple[Any, ...]]:
    with RawClient(address) as c:
        resp = c.call(29, 3, request(29, 3, resource_type_filter=1, resource_name_filter=None,
                                     pattern_type_filter=1, principal_filter=None,
                                     host_filter=None, operation=1, permission_type=1))
    assert resp.error_code == ErrorCode.none
    return {(int(r.resource_type), r.resource_name, int(r.pattern_type), a.principal, a.host,
             int(a.operation), int(a.permission_type)) for r in resp.resources for a in r.acls}


def _alter_scram(address: str, *, upsert: tuple[str, str] | None = None,
                 delete: str | None = None) -> list[tuple[str, int]]:
    """AlterUserScramCredentials on this broker: set ``upsert`` (user, password) as a client
    does (salted here), or delete ``delete``'s SCRAM-SHA-256 credential."""
    m = RawClient.request_module(51, 0)
    upsertions, deletions = [], []
    if upsert is not None:
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac("sha256", upsert[1].encode(), salt, 4096)
        upsertions.append(m.ScramCredentialUpsertion(name=upsert[0], mechanism=1,
                                                     iterations=4096, salt=salt,
                                                     salted_password=salted))
    if delete is not None:
        deletions.append(m.ScramCredentialDeletion(name=delete, mechanism=1))
    with RawClient(address, timeout=T) as c:
        resp = c.call(51, 0, request(51, 0, deletions=tuple(deletions),
                                     upsertions=tuple(upsertions)))
    return [(r.user, int(r.error_code)) for r in resp.results]


def _describe_scram(address: str) -> dict[str, list[tuple[int, int]]]:
    with RawClient(address) as c:
        resp = c.call(50, 0, request(50, 0, users=None))
    return {r.user: [(int(i.mechanism), int(i.iterations)) for i in r.credential_infos]
            for r in resp.results}


def _scram_login(address: str, user: str, password: str) -> bool:
    with RawClient(address) as c:
        assert c.call(17, 1, request(17, 1, mechanism=SHA256)).error_code == 0
        client = scramp.ScramClient([SHA256], user, password)
        first = c.call(36, 2, request(36, 2, auth_bytes=client.get_client_first().encode()))
        if first.error_code != 0:
            return False
        client.set_server_first(first.auth_bytes.decode())
        final = c.call(36, 2, request(36, 2, auth_bytes=client.get_client_final().encode()))
        return bool(final.error_code == 0)


def _share_version(address: str) -> tuple[int, int]:
    """(finalized share.version, finalized features epoch) that this broker advertises."""
    with RawClient(address) as c:
        resp = c.call(18, 3, request(18, 3, client_software_name="t",
                                     client_software_version="1"))
    levels = {f.name: int(f.max_version_level) for f in resp.finalized_features}
    return levels["share.version"], int(resp.finalized_features_epoch)


# -- tests ---------------------------------------------------------------------------------

def test_an_acl_made_through_one_broker_holds_on_all_and_a_deletion_anywhere_too(
        cluster: Cluster) -> None:
    one, two, three = cluster.brokers
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("guarded", 3, 1)])["guarded"].result(T)
    _wait(lambda: all(_topic_error(b.bootstrap, "guarded") == ErrorCode.none
                      for b in cluster.brokers), "the topic on every broker")

    # DENY User:ANONYMOUS DESCRIBE on the topic, through broker 1: brokers 2 and 3 refuse as
    # soon as their watch brings it (broker 1 answered once its own view had it).
    assert _create_acl(one.bootstrap, "guarded", operation=8, permission=2) == [0]
    assert _topic_error(one.bootstrap, "guarded") == ErrorCode.topic_authorization_failed
    _wait(lambda: all(_topic_error(b.bootstrap, "guarded") == ErrorCode.topic_authorization_failed
                      for b in cluster.brokers), "the DENY on every broker")
    # A confluent-kafka client (any broker it picks) cannot see the topic either.
    md = AdminClient({"bootstrap.servers": two.bootstrap}).list_topics("guarded", timeout=T)
    assert md.topics["guarded"].error is not None
    assert md.topics["guarded"].error.code() == ErrorCode.topic_authorization_failed

    # Every broker lists the same ACLs, and so does confluent-kafka's describe_acls.
    deny = (2, "guarded", 3, "User:ANONYMOUS", "*", 8, 2)
    assert [_describe_acls(b.bootstrap) for b in cluster.brokers] == [{deny}] * 3
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(everything, request_timeout=T).result(timeout=T)
    assert listed == [AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL,
                                 "User:ANONYMOUS", "*", AclOperation.DESCRIBE,
                                 AclPermissionType.DENY)]

    # DeleteAcls through broker 3: gone everywhere.
    assert _delete_acls(three.bootstrap) == 1
    _wait(lambda: all(not _describe_acls(b.bootstrap) for b in cluster.brokers),
          "the deletion on every broker")
    assert all(_topic_error(b.bootstrap, "guarded") == ErrorCode.none for b in cluster.brokers)
    # None of it went to the brokers' own acls.json.
    assert not any((b.data_dir / "acls.json").exists() for b in cluster.brokers)


def test_a_scram_user_made_through_one_broker_logs_in_on_all_and_deletion_holds_everywhere(
        cluster: Cluster) -> None:
    one, two, three = cluster.brokers
    assert _alter_scram(one.bootstrap, upsert=("alice", "alice-secret")) == [("alice", 0)]
    # Broker 1 answered once the credential was in etcd and back in its own view.
    assert _scram_login(_internal(one), "alice", "alice-secret")
    _wait(lambda: all(_scram_login(_internal(b), "alice", "alice-secret") for b in (two, three)),
          "alice's login on brokers 2 and 3")
    assert not _scram_login(_internal(three), "alice", "wrong")
    assert [_describe_scram(b.bootstrap) for b in cluster.brokers] == [
        {"alice": [(1, 4096)]}] * 3

    # A confluent-kafka client authenticates with SCRAM-SHA-256 on broker 3's SASL listener.
    sasl = AdminClient({"bootstrap.servers": _internal(three), "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": SHA256, "sasl.username": "alice",
                        "sasl.password": "alice-secret"})
    assert sorted(sasl.list_topics(timeout=T).brokers) == [1, 2, 3]

    # Deleted through broker 2: nobody lets alice in any more, every broker lists no one.
    assert _alter_scram(two.bootstrap, delete="alice") == [("alice", 0)]
    _wait(lambda: not any(_scram_login(_internal(b), "alice", "alice-secret")
                          for b in cluster.brokers), "alice refused everywhere")
    assert [_describe_scram(b.bootstrap) for b in cluster.brokers] == [{}] * 3
    # Deleting it again is Kafka's RESOURCE_NOT_FOUND, on any broker.
    assert _alter_scram(three.bootstrap, delete="alice") == [
        ("alice", ErrorCode.resource_not_found)]
    bad = AdminClient({"bootstrap.servers": _internal(one), "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": SHA256, "sasl.username": "alice",
                       "sasl.password": "alice-secret"})
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=5)


def test_every_broker_advertises_the_clusters_share_version_and_add_scram_reaches_etcd(
        cluster: Cluster) -> None:
    levels = [_share_version(b.bootstrap) for b in cluster.brokers]
    assert levels == [levels[0]] * 3 and levels[0][0] == 2
    # Broker 3 comes back configured for share.version 1 and with an --add-scram user: the
    # cluster's level stays (logged), the user reaches every broker through etcd.
    three = cluster.brokers[2]
    three.stop()
    three.overrides["share.version"] = "1"
    three.extra_args += ["--add-scram", f"{SHA256}=[name=ops,password=ops-secret]"]
    three.start()
    assert [_share_version(b.bootstrap) for b in cluster.brokers] == [levels[0]] * 3
    assert "share.version=1 is not applied" in three.logs()
    _wait(lambda: all(_scram_login(_internal(b), "ops", "ops-secret") for b in cluster.brokers),
          "ops's login on every broker")
    # Started again with the same --add-scram: etcd already has it, nothing is rewritten.
    three.stop()
    three.start()
    assert "SCRAM credential of user ops (SCRAM-SHA-256) from --add-scram is already in etcd" \
        in three.logs()
    assert _scram_login(_internal(cluster.brokers[0]), "ops", "ops-secret")


def test_with_etcd_away_acl_and_credential_changes_are_refused_and_nothing_changes(
        cluster: Cluster) -> None:
    one, two, _three = cluster.brokers
    cluster.etcd.stop()
    try:
        assert _create_acl(one.bootstrap, "t", operation=8, permission=2) == [
            ErrorCode.kafka_storage_error]
        assert _alter_scram(two.bootstrap, upsert=("bob", "bob-secret")) == [
            ("bob", ErrorCode.kafka_storage_error)]
    finally:
        cluster.etcd.start()
    assert [_describe_acls(b.bootstrap) for b in cluster.brokers] == [set()] * 3
    assert [_describe_scram(b.bootstrap) for b in cluster.brokers] == [{}] * 3
    assert not _scram_login(_internal(two), "bob", "bob-secret")
    # Once etcd is back, the same change goes through.
    _wait(lambda: _alter_scram(two.bootstrap, upsert=("bob", "bob-secret")) == [("bob", 0)],
          "a credential change after etcd came back", timeout=30)
    assert _scram_login(_internal(two), "bob", "bob-secret")
