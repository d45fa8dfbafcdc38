"""TLS and SASL listeners end to end (issue 13): one broker started from the reference
``tests/secure-server.properties`` with only its certificate paths, ports and data directory
substituted, serving SASL_SSL (PLAIN, SCRAM-SHA-256/512) and SSL (client certificate required).

Certificates are made at test time (trustme); no private key is committed. The broker has the
StandardAuthorizer with ``super.users=User:admin``, so the happy paths log in as admin. A
principal is observed through DescribeUserScramCredentials, whose refusal names it, and an ACL
that grants exactly that principal.

The broker runs with ``--override connections.authentication.timeout.ms=1500`` (a command-line
option, the file stays the reference) so that stalled handshakes are closed within the test.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from kio.schema.errors import ErrorCode

from tests.conftest import ROOT, BrokerProcess, free_port
from tests.integration.rawclient import RawClient, closed_by_peer, request, request_module
from tests.integration.share_helpers import GROUP_RESOURCE, poll_until, share_consumer

T = 15.0
REFERENCE = ROOT / "tests" / "secure-server.properties"
AUTH_TIMEOUT_MS = 1500
CLIENT_DN = "CN=alice-cert,OU=tests,O=Shoal"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Secure:
    """The running broker, its addresses and the client-side TLS material."""

    def __init__(self, broker: BrokerProcess, sasl_port: int, ssl_port: int, metrics_port: int,
                 certs: Path) -> None:
        self.broker = broker
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.ssl = f"127.0.0.1:{ssl_port}"
        self.metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        self.ca = str(certs / "ca.pem")
        self.client_cert = str(certs / "client.pem")
        self.client_key = str(certs / "client.key")

    def sasl_conf(self, mechanism: str = "SCRAM-SHA-256", user: str = "admin",
                  password: str = "admin-secret", **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                "ssl.ca.location": self.ca, **extra}

    def mtls_conf(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.ssl, "security.protocol": "SSL",
                "ssl.ca.location": self.ca, "ssl.certificate.location": self.client_cert,
                "ssl.key.location": self.client_key, **extra}

    def tls_context(self, client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx

    def metric(self, name: str, **labels: str) -> float:
        text = urllib.request.urlopen(self.metrics, timeout=T).read().decode()
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
            if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
                return float(m.group(2))
        return 0.0


def _write_certs(certs: Path) -> None:
    certs.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(certs / "server.pem"))
    client = ca.issue_cert("alice@example.com", common_name="alice-cert",
                           organization_name="Shoal", organization_unit_name="tests")
    client.private_key_pem.write_to_path(str(certs / "client.key"))
    client.cert_chain_pems[0].write_to_path(str(certs / "client.pem"))


def substituted_config(certs: Path, data: Path, sasl_port: int, ssl_port: int) -> str:
    """The reference config with only certificate paths, ports and log.dirs changed."""
    text = REFERENCE.read_text()
    return (text.replace("/etc/shoal/certs", str(certs))
            .replace(":9093", f":{sasl_port}").replace(":9094", f":{ssl_port}")
            .replace("log.dirs=/var/lib/shoal", f"log.dirs={data}"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    root = tmp_path_factory.mktemp("secure")
    certs = root / "certs"
    _write_certs(certs)
    sasl_port, ssl_port, metrics_port = free_port(), free_port(), free_port()
    config = root / "server.properties"
    config.write_text(substituted_config(certs, root / "data", sasl_port, ssl_port))
    broker = BrokerProcess(root / "data", listen=False, port=sasl_port, extra_args=[
        "--config", str(config), "--metrics-listen", f"127.0.0.1:{metrics_port}",
        "--override", f"connections.authentication.timeout.ms={AUTH_TIMEOUT_MS}",
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"])
    broker.start()
    yield Secure(broker, sasl_port, ssl_port, metrics_port, certs)
    assert broker.stop() == 0, broker.logs()


def _admin_raw(secure: Secure) -> RawClient:
    """A raw client logged in as admin with PLAIN over SASL_SSL (SaslHandshake v1)."""
    c = RawClient(secure.sasl, tls=secure.tls_context())
    assert c.call(17, 1, request(17, 1, mechanism="PLAIN")).error_code == ErrorCode.none
    done = c.call(36, 2, request(36, 2, auth_bytes=b"\x00admin\x00admin-secret"))
    assert done.error_code == ErrorCode.none, done
    return c


def _earliest(secure: Secure, group: str) -> None:
    m = request_module(44, 1)
    body = m.IncrementalAlterConfigsRequest(
        resources=(m.AlterConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=group,
            configs=(m.AlterableConfig(name="share.auto.offset.reset", config_operation=0,
                                       value="earliest"),)),),
        validate_only=False)
    with _admin_raw(secure) as c:
        (r,) = c.call(44, 1, body).responses
    assert r.error_code == ErrorCode.none, r


def _create_topic(conf: dict[str, Any], topic: str) -> None:
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic(topic, 1)], request_timeout=T).values():
        f.result(timeout=T)


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    p = Producer({**conf, "acks": "all"})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(T) == 0
    assert errors == [None] * len(values)


def _auth_errors(conf: dict[str, Any], seconds: float = T) -> list[KafkaError]:
    """The error callbacks a client gets while it tries to reach the broker."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + seconds
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
        except KafkaException:
            pass
        admin.poll(0.1)  # serves error_cb
    del admin
    return errors


# -- the reference config ---------------------------------------------------------------------

def test_the_reference_config_is_used_unchanged_but_for_paths_and_ports(tmp_path: Path) -> None:
    original = REFERENCE.read_text().splitlines()
    changed = substituted_config(tmp_path, tmp_path / "d", 1, 2).splitlines()
    different = [(a, b) for a, b in zip(original, changed, strict=True) if a != b]
    assert [a.split("=")[0] for a, _ in different] == [
        "listeners", "advertised.listeners", "log.dirs", "ssl.keystore.location",
        "ssl.truststore.location"]


# -- SASL_SSL with real clients ---------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_produce_and_share_consume_over_sasl_ssl(secure: Secure, unique: str,
                                                 mechanism: str) -> None:
    conf = secure.sasl_conf(mechanism)
    _create_topic(conf, unique)
    values = [f"{mechanism}-{i}".encode() for i in range(20)]
    _produce(conf, unique, values)
    _earliest(secure, f"g-{unique}")
    consumer = share_consumer(secure.sasl, f"g-{unique}", unique, **{
        k: v for k, v in conf.items() if k != "bootstrap.servers"})
    got: list[bytes] = []
    try:
        poll_until([consumer], lambda: len(got) >= len(values), timeout=30,
                   on_message=lambda _i, m: got.append(m.value()))
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    assert secure.metric("shoal_sasl_authentications_total", listener="SASL_SSL",
                         mechanism=mechanism) >= 1


def test_metadata_advertises_the_listener_the_client_came_in_on(secure: Secure) -> None:
    sasl = AdminClient(secure.sasl_conf()).list_topics(timeout=T)
    mtls = AdminClient(secure.mtls_conf()).list_topics(timeout=T)
    assert [f"{b.host}:{b.port}" for b in sasl.brokers.values()] == [secure.sasl]
    assert [f"{b.host}:{b.port}" for b in mtls.brokers.values()] == [secure.ssl]


def test_a_scram_user_created_over_the_wire_logs_in_with_its_principal(secure: Secure) -> None:
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    admin = AdminClient(secure.sasl_conf("SCRAM-SHA-512"))
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-secret")
    for f in admin.alter_user_scram_credentials([upsert], request_timeout=T).values():
        f.result(timeout=T)
    bob = AdminClient(secure.sasl_conf("SCRAM-SHA-512", "bob", "bob-secret"))
    futures = bob.describe_user_scram_credentials(["bob"], request_timeout=T)
    assert isinstance(futures, dict)
    with pytest.raises(KafkaException) as info:
        futures["bob"].result(timeout=T)
    assert info.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
    assert "User:bob is not authorized" in info.value.args[0].str()


def test_aiokafka_produces_and_reads_metadata_over_sasl_ssl(secure: Secure, unique: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    _create_topic(secure.sasl_conf(), unique)

    async def run(mechanism: str) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=secure.sasl, security_protocol="SASL_SSL",
            sasl_mechanism=mechanism, sasl_plain_username="admin",
            sasl_plain_password="admin-secret",
            ssl_context=create_ssl_context(cafile=secure.ca), request_timeout_ms=10_000)
        await producer.start()
        try:
            partitions = await producer.partitions_for(unique)
            assert partitions == {0}
            meta = await producer.send_and_wait(unique, f"aio-{mechanism}".encode())
            assert meta.topic == unique
        finally:
            await producer.stop()

    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        asyncio.run(run(mechanism))


# -- mutual TLS ---------------------------------------------------------------------------------

def test_a_client_certificate_is_the_principal(secure: Secure) -> None:
    mtls = AdminClient(secure.mtls_conf())
    futures = mtls.describe_user_scram_credentials(["admin"], request_timeout=T)
    assert isinstance(futures, dict)
    with pytest.raises(KafkaException) as info:
        futures["admin"].result(timeout=T)
    assert f"User:{CLIENT_DN} is not authorized" in info.value.args[0].str()
    # An ACL for exactly that principal lets it describe.
    admin = AdminClient(secure.sasl_conf())
    grant = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                       f"User:{CLIENT_DN}", "*", AclOperation.DESCRIBE,
                       AclPermissionType.ALLOW)
    for f in admin.create_acls([grant], request_timeout=T).values():
        f.result(timeout=T)
    again = AdminClient(secure.mtls_conf())
    described = again.describe_user_scram_credentials(["admin"], request_timeout=T)
    assert isinstance(described, dict)
    assert described["admin"].result(timeout=T).user == "admin"


def test_the_ssl_listener_refuses_a_client_without_a_certificate(secure: Secure) -> None:
    conf = {"bootstrap.servers": secure.ssl, "security.protocol": "SSL",
            "ssl.ca.location": secure.ca}
    before = secure.metric("shoal_tls_handshake_failures_total", listener="SSL")
    errors = _auth_errors(conf)
    assert errors, "the client reached a listener that requires a certificate"
    assert secure.metric("shoal_tls_handshake_failures_total", listener="SSL") > before
    AdminClient(secure.mtls_conf()).list_topics(timeout=T)  # others are served


# -- failures -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_fails_and_the_broker_keeps_serving(secure: Secure,
                                                             mechanism: str) -> None:
    before = secure.metric("shoal_sasl_authentication_failures_total", listener="SASL_SSL",
                           mechanism=mechanism)
    errors = _auth_errors(secure.sasl_conf(mechanism, password="not-the-password"))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Authentication failed" in e.str() for e in errors), errors
    assert secure.metric("shoal_sasl_authentication_failures_total", listener="SASL_SSL",
                         mechanism=mechanism) > before
    AdminClient(secure.sasl_conf(mechanism)).list_topics(timeout=T)
    log = secure.broker.logs()
    assert "not-the-password" not in log
    assert "SASL authentication of User:admin from 127.0.0.1:" in log


def test_the_failed_authentication_answer_then_close(secure: Secure) -> None:
    with RawClient(secure.sasl, tls=secure.tls_context()) as c:
        hs = c.call(17, 1, request(17, 1, mechanism="PLAIN"))
        assert hs.error_code == ErrorCode.none
        assert set(hs.mechanisms) == set(MECHANISMS)
        resp = c.call(36, 2, request(36, 2, auth_bytes=b"\x00admin\x00wrong"))
        assert resp.error_code == ErrorCode.sasl_authentication_failed
        assert resp.error_message and "PLAIN" in resp.error_message
        assert closed_by_peer(c.sock)


def test_an_unknown_mechanism_is_unsupported(secure: Secure) -> None:
    with RawClient(secure.sasl, tls=secure.tls_context()) as c:
        resp = c.call(17, 1, request(17, 1, mechanism="GSSAPI"))
        assert resp.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(resp.mechanisms) == set(MECHANISMS)
        assert closed_by_peer(c.sock)


def test_a_request_before_authentication_closes_the_connection(secure: Secure) -> None:
    with RawClient(secure.sasl, tls=secure.tls_context()) as c:
        versions = c.call(18, 3, request(18, 3, client_software_name="t",
                                         client_software_version="1"))
        assert {k.api_key for k in versions.api_keys} >= {17, 36}
        c.send(3, 12, request(3, 12, topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False))
        assert closed_by_peer(c.sock)


def test_sasl_handshake_v0_then_raw_tokens(secure: Secure) -> None:
    """Pre-KIP-152 framing: after SaslHandshake v0 the tokens travel without headers."""
    with RawClient(secure.sasl, tls=secure.tls_context()) as c:
        assert c.call(17, 0, request(17, 0, mechanism="PLAIN")).error_code == ErrorCode.none
        c.send_frame(b"\x00admin\x00admin-secret")
        assert c.receive_frame() == b""
        meta = c.call(3, 12, request(3, 12, topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False))
        assert [(b.host, b.port) for b in meta.brokers] == [tuple(_split(secure.sasl))]
        again = c.call(17, 1, request(17, 1, mechanism="PLAIN"))
        assert again.error_code == ErrorCode.illegal_sasl_state


def test_plaintext_client_on_a_tls_port_is_closed(secure: Secure) -> None:
    before = secure.metric("shoal_tls_handshake_failures_total", listener="SASL_SSL")
    with RawClient(secure.sasl) as c:
        c.send(18, 0, request(18, 0))
        assert closed_by_peer(c.sock)
    AdminClient(secure.sasl_conf()).list_topics(timeout=T)
    assert secure.metric("shoal_tls_handshake_failures_total", listener="SASL_SSL") > before


def test_stalled_tls_and_sasl_handshakes_are_closed(secure: Secure) -> None:
    host, port = _split(secure.sasl)
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=T) as silent, \
            RawClient(secure.sasl, tls=secure.tls_context()) as unauthenticated:
        AdminClient(secure.sasl_conf()).list_topics(timeout=T)  # others keep working
        assert closed_by_peer(silent, timeout=AUTH_TIMEOUT_MS / 1000 + 5)
        assert closed_by_peer(unauthenticated.sock, timeout=AUTH_TIMEOUT_MS / 1000 + 5)
    assert time.monotonic() - start >= AUTH_TIMEOUT_MS / 1000 - 0.2
    AdminClient(secure.sasl_conf()).list_topics(timeout=T)
    assert secure.broker.alive()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def test_plaintext_and_sasl_plaintext_listeners_side_by_side(tmp_path: Path) -> None:
    """Two listeners of one broker, each advertising itself; ``inter.broker.listener.name`` is
    accepted; PLAIN over SASL_PLAINTEXT; no authorizer, so both principals may do everything."""
    plain, sasl = free_port(), free_port()
    broker = BrokerProcess(tmp_path / "data", listen=False, port=plain, extra_args=[
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{plain},"
                      f"SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "--override", "inter.broker.listener.name=PLAINTEXT",
        "--override", "sasl.enabled.mechanisms=PLAIN",
        "--override", "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required "
                      'user_alice="alice-secret";'])
    broker.start()
    try:
        by_plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
        by_sasl = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl}",
                               "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": "alice", "sasl.password": "alice-secret"})
        for admin, port in ((by_plain, plain), (by_sasl, sasl)):
            meta = admin.list_topics(timeout=T)
            assert [(b.host, b.port) for b in meta.brokers.values()] == [("127.0.0.1", port)]
        _create_topic({"bootstrap.servers": f"127.0.0.1:{sasl}",
                       "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                       "sasl.username": "alice", "sasl.password": "alice-secret"}, "side")
        with RawClient(f"127.0.0.1:{plain}") as c:  # no SASL here: Kafka's answer
            resp = c.call(17, 1, request(17, 1, mechanism="PLAIN"))
            assert resp.error_code == ErrorCode.illegal_sasl_state
    finally:
        assert broker.stop() == 0, broker.logs()


def test_connection_limits_count_tls_handshakes_across_listeners(tmp_path: Path) -> None:
    """``max.connections.per.ip`` counts a TLS connection from accept, before its handshake, and
    across listeners. Runs on the stdlib event loop (``--no-uvloop``), so the TLS path is
    exercised on both loops by this module."""
    certs = tmp_path / "certs"
    _write_certs(certs)
    plain, tls = free_port(), free_port()
    broker = BrokerProcess(tmp_path / "data", listen=False, port=plain, extra_args=[
        "--no-uvloop",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "--override", "ssl.keystore.type=PEM",
        "--override", f"ssl.keystore.location={certs / 'server.pem'}",
        "--override", "max.connections.per.ip=2"])
    broker.start()
    try:
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with RawClient(f"127.0.0.1:{tls}", tls=ctx) as served:
            assert served.call(18, 3, request(18, 3, client_software_name="t",
                                              client_software_version="1")).api_keys
            with socket.create_connection(("127.0.0.1", tls), timeout=T) as silent:
                time.sleep(0.2)  # accepted and counted, handshake pending
                with socket.create_connection(("127.0.0.1", plain), timeout=T) as third:
                    assert closed_by_peer(third)
                assert not closed_by_peer(silent, timeout=0.3)
        assert "max.connections.per.ip=2" in broker.logs()
    finally:
        assert broker.stop() == 0, broker.logs()
