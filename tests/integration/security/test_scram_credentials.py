"""SCRAM credentials over the wire: confluent-kafka's AdminClient alters and describes them, they
survive kill -9, ``--add-scram`` bootstraps them, and what librdkafka salted logs in through the
SASL core. Without an ACL authorizer only ``super.users`` may manage them (issue 25): checked end
to end on a SASL listener, where a stolen credential would be a login."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
import scramp
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from broker.security.sasl import Authenticator, SaslServerConfig
from broker.security.scram_store import ScramStore
from tests.conftest import ROOT, BrokerProcess, free_port
from tests.integration.rawclient import RawClient, request

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
TIMEOUT = 15


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 10000})


def _upsert(user: str, mech: ScramMechanism, password: str, iterations: int = 4096,
            salt: bytes | None = None) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations),
                                        password.encode(), salt)


def _alter(admin: AdminClient,
           alterations: list[UserScramCredentialAlteration]) -> dict[str, str | None]:
    """{user: None (ok) or the error's name}."""
    out: dict[str, str | None] = {}
    for user, fut in admin.alter_user_scram_credentials(alterations,
                                                        request_timeout=TIMEOUT).items():
        try:
            fut.result(TIMEOUT)
            out[user] = None
        except KafkaException as exc:
            out[user] = exc.args[0].name()
    return out


def _describe_all(admin: AdminClient) -> dict[str, dict[str, int]]:
    future = admin.describe_user_scram_credentials(request_timeout=TIMEOUT)
    assert isinstance(future, Future)
    got = future.result(TIMEOUT)
    return {user: {ScramMechanism(i.mechanism).name: i.iterations
                   for i in d.scram_credential_infos} for user, d in got.items()}


def _login(store: ScramStore, mechanism: str, user: str, password: str) -> str | None:
    a = Authenticator(SaslServerConfig((mechanism,)), store.lookup)
    a.handshake(mechanism)
    client = scramp.ScramClient([mechanism], user, password)
    first = a.step(client.get_client_first().encode())
    if first.error is not None:
        return None
    client.set_server_first(first.response.decode())  # type: ignore[union-attr]
    return a.step(client.get_client_final().encode()).principal


# Clients of a PLAINTEXT listener are User:ANONYMOUS; without an ACL authorizer the SCRAM RPCs
# are for super.users only.
ANONYMOUS_SUPER = {"super.users": "User:ANONYMOUS"}


def test_alter_describe_and_survive_kill(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", ANONYMOUS_SUPER)
    b.start()
    try:
        admin = _admin(b)
        assert _describe_all(admin) == {}
        assert _alter(admin, [_upsert("alice", SHA256, "alice-secret", 8192),
                              _upsert("alice", SHA512, "alice-secret"),
                              _upsert("bob", SHA512, "bob-secret", salt=b"s" * 16)]) == {
            "alice": None, "bob": None}
        assert _describe_all(admin) == {"alice": {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 4096},
                                        "bob": {"SCRAM_SHA_512": 4096}}
        # Kafka's validations.
        assert _alter(admin, [_upsert("carol", SHA256, "x", 100),
                              _upsert("dave", SHA256, "x", 20000),
                              UserScramCredentialDeletion("bob", SHA256)]) == {
            "carol": "UNACCEPTABLE_CREDENTIAL", "dave": "UNACCEPTABLE_CREDENTIAL",
            "bob": "RESOURCE_NOT_FOUND"}
        assert _alter(admin, [_upsert("erin", SHA256, "x"), _upsert("erin", SHA256, "y")]) == {
            "erin": "DUPLICATE_RESOURCE"}
        futures = admin.describe_user_scram_credentials(["bob", "nobody"],
                                                        request_timeout=TIMEOUT)
        assert isinstance(futures, dict)
        assert [i.iterations for i in futures["bob"].result(TIMEOUT).scram_credential_infos] == [
            4096]
        with pytest.raises(KafkaException) as info:
            futures["nobody"].result(TIMEOUT)
        assert info.value.args[0].name() == "RESOURCE_NOT_FOUND"
        # Deletion.
        assert _alter(admin, [UserScramCredentialDeletion("alice", SHA512)]) == {"alice": None}

        b.kill()  # SIGKILL: the answer came after the write was durable
        b.start()
        admin = _admin(b)
        assert _describe_all(admin) == {"alice": {"SCRAM_SHA_256": 8192},
                                        "bob": {"SCRAM_SHA_512": 4096}}
    finally:
        b.stop()
    # What librdkafka salted is what the SCRAM server checks.
    store = ScramStore.open(b.data_dir)
    assert _login(store, "SCRAM-SHA-256", "alice", "alice-secret") == "User:alice"
    assert _login(store, "SCRAM-SHA-256", "alice", "wrong") is None
    assert _login(store, "SCRAM-SHA-512", "bob", "bob-secret") == "User:bob"


def test_add_scram_at_start(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", ANONYMOUS_SUPER, extra_args=[
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]"])
    b.start()
    try:
        assert _describe_all(_admin(b)) == {"admin": {"SCRAM_SHA_256": 4096,
                                                      "SCRAM_SHA_512": 8192}}
        assert "admin-secret" not in b.logs()
    finally:
        b.stop()
    store = ScramStore.open(b.data_dir)
    assert _login(store, "SCRAM-SHA-512", "admin", "admin-secret") == "User:admin"


def test_a_bad_add_scram_stops_the_broker(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "broker.main", "broker", "--data-dir", str(tmp_path),
         "--listen", "127.0.0.1:0", "--add-scram", "SCRAM-SHA-256=[name=a,password=p,"
         "iterations=10]"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--add-scram: SCRAM-SHA-256: Too few iterations" in proc.stderr
    assert "password=p" not in proc.stderr


def test_the_secure_config_without_its_certificate_files_stops_the_broker(tmp_path: Path) -> None:
    """The reference secure config names /etc/shoal/certs/*.pem; without them the broker stops
    with a configuration error naming the setting, before it accepts anyone."""
    proc = subprocess.run(
        [sys.executable, "-m", "broker.main", "broker", "--data-dir", str(tmp_path),
         "--config", str(ROOT / "tests" / "secure-server.properties")],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "shoal: configuration error:" in proc.stderr
    assert "ssl.keystore.location" in proc.stderr


def test_acl_authorizer_guards_the_scram_rpcs(tmp_path: Path) -> None:
    """With ACLs on, altering needs CLUSTER ALTER and describing CLUSTER DESCRIBE: an anonymous
    client without ACLs is refused, a super user is not."""
    acls = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    b = BrokerProcess(tmp_path / "data", overrides=acls)
    b.start()
    try:
        admin = _admin(b)
        assert _alter(admin, [_upsert("alice", SHA256, "pw")]) == {
            "alice": "CLUSTER_AUTHORIZATION_FAILED"}
        with pytest.raises(KafkaException) as info:
            _describe_all(admin)
        assert info.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        futures = admin.describe_user_scram_credentials(["alice"], request_timeout=TIMEOUT)
        assert isinstance(futures, dict)
        with pytest.raises(KafkaException) as info:
            futures["alice"].result(TIMEOUT)
        assert info.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
    finally:
        b.stop()
    b = BrokerProcess(tmp_path / "data", overrides={**acls, "super.users": "User:ANONYMOUS"})
    b.start()
    try:
        admin = _admin(b)
        assert _alter(admin, [_upsert("alice", SHA256, "pw")]) == {"alice": None}
        assert _describe_all(admin) == {"alice": {"SCRAM_SHA_256": 4096}}
    finally:
        b.stop()


def _scram_login(address: str, user: str, password: str,
                 mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether ``user`` logs in with ``password`` on the SASL listener at ``address`` (SaslHandshake
    v1 then SaslAuthenticate v2, as Java clients do)."""
    with RawClient(address, timeout=TIMEOUT) as c:
        assert c.call(17, 1, request(17, 1, mechanism=mechanism)).error_code == 0
        client = scramp.ScramClient([mechanism], user, password)
        first = c.call(36, 2, request(36, 2, auth_bytes=client.get_client_first().encode()))
        if first.error_code != 0:
            return False
        client.set_server_first(first.auth_bytes.decode())
        final = c.call(36, 2, request(36, 2, auth_bytes=client.get_client_final().encode()))
        return bool(final.error_code == 0)


def test_without_acls_only_super_users_manage_credentials(tmp_path: Path) -> None:
    """Authorization off (no authorizer.class.name), super.users=User:admin. An anonymous client
    (PLAINTEXT listener) and a SASL user outside super.users can neither give admin a password of
    their own (then log in as admin), delete someone's credential, nor list the users; admin can
    do all three."""
    plain_port, sasl_port = free_port(), free_port()
    sasl = f"127.0.0.1:{sasl_port}"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    b = BrokerProcess(tmp_path / "data", {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://{sasl}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
        "super.users": "User:admin"}, port=plain_port, listen=False, extra_args=[
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]"])
    b.start()
    try:
        def sasl_admin(user: str, password: str) -> AdminClient:
            return AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
                                "sasl.password": password, "socket.timeout.ms": 10000})

        refused = "CLUSTER_AUTHORIZATION_FAILED"
        for who in (_admin(b), sasl_admin("alice", "alice-secret")):
            assert _alter(who, [_upsert("admin", SHA256, "stolen"),
                                _upsert("admin", SHA512, "stolen")]) == {"admin": refused}
            assert _alter(who, [UserScramCredentialDeletion("admin", SHA256)]) == {
                "admin": refused}
            with pytest.raises(KafkaException) as info:
                _describe_all(who)
            assert info.value.args[0].name() == refused
            assert "only super.users may" in info.value.args[0].str()
        # Nothing changed: admin cannot be impersonated, and still logs in.
        assert not _scram_login(sasl, "admin", "stolen")
        assert not _scram_login(sasl, "admin", "stolen", "SCRAM-SHA-512")
        assert _scram_login(sasl, "admin", "admin-secret")
        # The super user manages them.
        admin = sasl_admin("admin", "admin-secret")
        assert _describe_all(admin) == {"admin": {"SCRAM_SHA_256": 4096},
                                        "alice": {"SCRAM_SHA_256": 4096}}
        assert _alter(admin, [_upsert("bob", SHA512, "bob-secret"),
                              UserScramCredentialDeletion("alice", SHA256)]) == {
            "bob": None, "alice": None}
        assert _scram_login(sasl, "bob", "bob-secret", "SCRAM-SHA-512")
        assert not _scram_login(sasl, "alice", "alice-secret")
        assert "stolen" not in b.logs()
    finally:
        b.stop()
