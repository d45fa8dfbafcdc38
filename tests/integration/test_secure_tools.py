"""The tools over TLS and SASL (issue 13, "Tools and clients"): the ``shoal`` CLI with
``--command-config`` and ``client.ShareConsumer`` against a broker started from the reference
``tests/secure-server.properties`` (SASL_SSL with PLAIN and SCRAM, SSL with a required client
certificate, StandardAuthorizer, ``super.users=User:admin``).

Certificates are made at test time (trustme); no private key is committed. Everything the tests
set up goes through the CLI as admin over SASL_SSL: topics, group configs, SCRAM users and the
ACLs a share consumer needs (GROUP READ and TOPIC READ), then the asyncio ShareConsumer logs in as
that user and consumes. Every wait is bounded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Producer

from client import KafkaError, ShareConsumer, ShareRecord
from tests.conftest import ROOT, BrokerProcess, free_port
from tests.integration.test_cli import Cli

pytestmark = pytest.mark.timeout(120)

REFERENCE = ROOT / "tests" / "secure-server.properties"
CLIENT_DN = "CN=alice-cert,OU=tests,O=Shoal"


class Secure:
    """The running broker, its two listeners and the client-side TLS files."""

    def __init__(self, broker: BrokerProcess, sasl_port: int, ssl_port: int,
                 certs: Path) -> None:
        self.broker = broker
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.ssl = f"127.0.0.1:{ssl_port}"
        self.certs = certs
        self.ca = str(certs / "ca.pem")

    def properties(self, name: str, text: str) -> str:
        path = self.certs.parent / name
        path.write_text(text)
        return str(path)

    def scram(self, user: str = "admin", password: str = "admin-secret",
              mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": password, "ssl.ca.location": self.ca}


def _write_certs(certs: Path) -> None:
    certs.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(certs / "server.pem"))
    client = ca.issue_cert("alice@example.com", common_name="alice-cert",
                           organization_name="Shoal", organization_unit_name="tests")
    client.private_key_pem.write_to_path(str(certs / "client.key"))
    client.cert_chain_pems[0].write_to_path(str(certs / "client.pem"))
    client.private_key_and_cert_chain_pem.write_to_path(str(certs / "client-keystore.pem"))
    trustme.CA().cert_pem.write_to_path(str(certs / "other-ca.pem"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    root = tmp_path_factory.mktemp("secure-tools")
    certs = root / "certs"
    _write_certs(certs)
    sasl_port, ssl_port = free_port(), free_port()
    listeners = f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}"
    config = root / "server.properties"
    # The reference file with only certificate paths and ports changed.
    config.write_text(REFERENCE.read_text().replace("/etc/shoal/certs", str(certs))
                      .replace(":9093", f":{sasl_port}").replace(":9094", f":{ssl_port}"))
    broker = BrokerProcess(root / "data", port=sasl_port, extra_args=[
        "--config", str(config), "--listen", listeners,
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"])
    broker.start()
    yield Secure(broker, sasl_port, ssl_port, certs)
    assert broker.stop() == 0, broker.logs()


class SecureCli(Cli):
    """``shoal`` with ``--command-config FILE`` on every command."""

    def __init__(self, bootstrap: str, command_config: str) -> None:
        super().__init__(bootstrap)
        self.command_config = command_config

    def run(self, command: str, *args: str) -> Any:
        return super().run(command, "--command-config", self.command_config, *args)


@pytest.fixture(scope="module")
def admin(secure: Secure) -> SecureCli:
    """The CLI as admin with SCRAM-SHA-256 in librdkafka's property names."""
    props = "".join(f"{k}={v}\n" for k, v in secure.scram().items())
    return SecureCli(secure.sasl, secure.properties("admin.properties", props))


def _produce(secure: Secure, topic: str, count: int) -> list[bytes]:
    values = [f"{topic}-{i}".encode() for i in range(count)]
    p = Producer({"bootstrap.servers": secure.sasl, **secure.scram()})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    return values


def _setup_topic(admin: SecureCli, topic: str, group: str) -> None:
    assert admin.ok("topics", "--create", "--topic", topic, "--partitions", "2") == \
        f"Created topic {topic}.\n"
    admin.ok("configs", "--entity-type", "groups", "--entity-name", group, "--alter",
             "--add-config", "share.auto.offset.reset=earliest")


async def _collect(c: ShareConsumer, want: int, timeout: float = 30.0) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"got {len(got)} of {want} records"
        for records in (await c.getmany(timeout_ms=300)).values():
            got.extend(records)
    return got


# ------------------------------------------------------------------------------- the CLI


def test_cli_manages_users_and_acls_over_sasl_ssl(secure: Secure, admin: SecureCli) -> None:
    assert admin.ok("users", "--add", "--name", "carol", "--mechanism", "SCRAM-SHA-512",
                    "--password", "carol-secret") == "Completed updating config for user carol.\n"
    users = json.loads(admin.ok("users", "--describe", "--output", "json"))
    assert {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 4096} in users
    assert {"user": "admin", "mechanism": "SCRAM-SHA-256", "iterations": 4096} in users
    admin.ok("acls", "--add", "--allow-principal", "User:carol", "--operation", "Describe",
             "--cluster")
    # carol logs in with Java's property names: a JAAS line and a PEM trust store.
    carol = SecureCli(secure.sasl, secure.properties("carol.properties", (
        "# carol, as a Java client would be configured\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="carol" password="carol-secret";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.ca}\n")))
    listed = json.loads(carol.ok("acls", "--list", "--principal", "User:carol", "--output",
                                 "json"))
    assert listed == [{"resource_type": "CLUSTER", "resource_name": "kafka-cluster",
                       "pattern_type": "LITERAL", "principal": "User:carol", "host": "*",
                       "operation": "DESCRIBE", "permission_type": "ALLOW"}]
    # DESCRIBE is not ALTER: carol may list ACLs but not add them.
    err = carol.fails("acls", "--add", "--allow-principal", "User:carol", "--topic", "t")
    assert "CLUSTER_AUTHORIZATION_FAILED" in err and "User:carol" in err
    # PLAIN with the JAAS user of the reference file.
    plain = SecureCli(secure.sasl, secure.properties("plain.properties", (
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
        f"sasl.password=admin-secret\nssl.ca.location={secure.ca}\n")))
    assert "carol" in plain.ok("users", "--describe")
    admin.ok("users", "--delete", "--name", "carol", "--mechanism", "SCRAM-SHA-512")


@pytest.mark.parametrize(("props", "message"), [
    ("sasl.password=wrong\n", "SASL SCRAM-SHA-256 authentication to 127.0.0.1:{port} failed: "
                              "SASL_AUTHENTICATION_FAILED: Authentication failed"),
    ("sasl.mechanism=OAUTHBEARER\n", "sasl.mechanism 'OAUTHBEARER' is not supported"),
    ("ssl.ca.location={other_ca}\n", "the broker's certificate did not verify"),
], ids=["bad-password", "unsupported-mechanism", "untrusted-broker"])
def test_cli_security_failures_are_one_line(secure: Secure, props: str, message: str) -> None:
    base = secure.scram()
    lines = "".join(f"{k}={v}\n" for k, v in base.items())
    text = lines + props.format(other_ca=secure.certs / "other-ca.pem")
    cli = SecureCli(secure.sasl, secure.properties("failing.properties", text))
    r = cli.run("topics", "--list")
    assert r.returncode in (1, 2) and r.stdout == "", r
    assert r.stderr.count("\n") == 1, r.stderr
    assert message.format(port=secure.sasl.rsplit(":", 1)[1]) in r.stderr
    assert "wrong" not in r.stderr and "admin-secret" not in r.stderr


def test_cli_with_a_client_certificate_is_that_principal(secure: Secure,
                                                         admin: SecureCli) -> None:
    principal = f"User:{CLIENT_DN}"
    admin.ok("acls", "--add", "--allow-principal", principal, "--operation", "Describe",
             "--cluster")
    try:
        for name, props in (
                ("mtls.properties", f"security.protocol=SSL\nssl.ca.location={secure.ca}\n"
                                    f"ssl.certificate.location={secure.certs / 'client.pem'}\n"
                                    f"ssl.key.location={secure.certs / 'client.key'}\n"),
                ("mtls-java.properties",
                 "security.protocol=SSL\nssl.truststore.type=PEM\n"
                 f"ssl.truststore.location={secure.ca}\nssl.keystore.type=PEM\n"
                 f"ssl.keystore.location={secure.certs / 'client-keystore.pem'}\n")):
            cli = SecureCli(secure.ssl, secure.properties(name, props))
            listed = json.loads(cli.ok("acls", "--list", "--cluster", "--principal", principal,
                                       "--output", "json"))
            assert [a["principal"] for a in listed] == [principal]
            # Only DESCRIBE was granted; the refusal names the certificate's principal.
            err = cli.fails("acls", "--add", "--allow-principal", "User:x", "--topic", "t")
            assert "CLUSTER_AUTHORIZATION_FAILED" in err and principal in err
        # Without a certificate the SSL listener (client auth required) refuses the handshake.
        bare = SecureCli(secure.ssl, secure.properties(
            "no-cert.properties", f"security.protocol=SSL\nssl.ca.location={secure.ca}\n"))
        r = bare.run("acls", "--list")
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r
    finally:
        admin.ok("acls", "--remove", "--cluster", "--allow-principal", principal, "--force")


# ------------------------------------------------------------------------ ShareConsumer


async def test_share_consumer_over_sasl_ssl_after_granting_group_and_topic_read(
        secure: Secure, admin: SecureCli) -> None:
    topic, group = "secure-orders", "secure-workers"
    _setup_topic(admin, topic, group)
    sent = _produce(secure, topic, 30)
    admin.ok("users", "--add", "--name", "alice", "--mechanism", "SCRAM-SHA-512",
             "--password", "alice-secret", "--iterations", "8192")

    # kafka-acls.sh's way of letting a (share) consumer in: GROUP READ and TOPIC READ.
    admin.ok("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--group", group)
    admin.ok("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--topic", topic)
    # The first batch through a config dict with Kafka's names, the rest with keywords.
    first = ShareConsumer(secure.sasl, group, acknowledgement_mode="explicit",
                          max_poll_records=10, acquire_mode="record_limit",
                          config=secure.scram("alice", "alice-secret", "SCRAM-SHA-512"))
    await first.start()
    try:
        first.subscribe([topic])
        got = await _collect(first, 1)  # one batch: acknowledge it all
        first.acknowledge_all()
        assert all(e is None for e in (await first.commit_sync()).values())
    finally:
        await first.close()
    second = ShareConsumer(secure.sasl, group, security_protocol="SASL_SSL",
                           sasl_mechanism="SCRAM-SHA-512", sasl_username="alice",
                           sasl_password="alice-secret", ssl_ca_location=secure.ca)
    await second.start()
    try:
        second.subscribe([topic])
        got += await _collect(second, len(sent) - len(got))
        assert sorted(r.value for r in got) == sorted(sent)
    finally:
        await second.close()


async def test_share_consumer_with_a_wrong_password_fails_to_start(secure: Secure) -> None:
    c = ShareConsumer(secure.sasl, "secure-nobody",
                      config=secure.scram("admin", "not-the-password"))
    with pytest.raises(KafkaError) as ei:
        await c.start()
    assert ei.value.name == "SASL_AUTHENTICATION_FAILED"
    assert "not-the-password" not in str(ei.value)
    await c.close()
    # A plaintext-looking config towards the TLS port fails rather than hanging.
    c = ShareConsumer(secure.sasl, "secure-nobody", request_timeout_ms=3000)
    with pytest.raises((ConnectionError, TimeoutError)):
        await c.start()
    await c.close()
