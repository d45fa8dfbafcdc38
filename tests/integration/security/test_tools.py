"""The tools over TLS and SASL (issue 13, "Tools and clients"): the ``shoal`` CLI with
``--command-config`` and ``client.ShareConsumer`` against a broker started from the reference
``tests/secure-server.properties`` (SASL_SSL with PLAIN and SCRAM, SSL with a required client
certificate, StandardAuthorizer, ``super.users=User:admin``).

The broker and its certificates come from ``test_secure_listeners``' fixture (made at test time
with trustme; no private key is committed). Everything the tests
set up goes through the CLI as admin over SASL_SSL: topics, group configs, SCRAM users and the
ACLs a share consumer needs (GROUP READ and TOPIC READ), then the asyncio ShareConsumer logs in as
that user and consumes. Every wait is bounded.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, Producer, TopicPartition

from client import KafkaError, ShareConsumer, ShareRecord
from tests.integration.security import test_listeners as listeners
from tests.integration.admin.test_cli import Cli

pytestmark = pytest.mark.timeout(120)

CLIENT_DN = listeners.CLIENT_DN
Secure = listeners.Secure
# The broker of the secure-listener tests, from the same reference file and fixture (a module
# of our own gets its own broker).
secure = listeners.secure


def certs(secure: Secure) -> Path:
    return Path(secure.ca).parent


def properties(secure: Secure, name: str, text: str) -> str:
    """A ``--command-config`` file next to the certificates."""
    path = certs(secure).parent / name
    path.write_text(text)
    return str(path)


def scram(secure: Secure, user: str = "admin", password: str = "admin-secret",
          mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    """Security properties (no bootstrap.servers) for a SCRAM login over SASL_SSL."""
    conf = secure.sasl_conf(mechanism, user, password)
    del conf["bootstrap.servers"]
    return conf


@pytest.fixture(scope="module")
def extra_certs(secure: Secure) -> Path:
    """Java's PEM key store of the client certificate (key and chain in one file) and a CA
    that did not sign the broker's certificate."""
    d = certs(secure)
    (d / "client-keystore.pem").write_text(Path(secure.client_key).read_text()
                                           + Path(secure.client_cert).read_text())
    trustme.CA().cert_pem.write_to_path(str(d / "other-ca.pem"))
    return d


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
    props = "".join(f"{k}={v}\n" for k, v in scram(secure).items())
    return SecureCli(secure.sasl, properties(secure, "admin.properties", props))


def _produce(secure: Secure, topic: str, count: int) -> list[bytes]:
    values = [f"{topic}-{i}".encode() for i in range(count)]
    p = Producer({"bootstrap.servers": secure.sasl, **scram(secure)})
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
    carol = SecureCli(secure.sasl, properties(secure, "carol.properties", (
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
    plain = SecureCli(secure.sasl, properties(secure, "plain.properties", (
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
        f"sasl.password=admin-secret\nssl.ca.location={secure.ca}\n")))
    assert "carol" in plain.ok("users", "--describe")
    admin.ok("users", "--delete", "--name", "carol", "--mechanism", "SCRAM-SHA-512")


def test_consumer_groups_over_sasl_ssl_and_what_acls_allow(secure: Secure,
                                                            admin: SecureCli) -> None:
    topic, group = "secure-cg", "secure-cg-group"
    assert admin.ok("topics", "--create", "--topic", topic, "--partitions", "1") == \
        f"Created topic {topic}.\n"
    _produce(secure, topic, 10)
    c = Consumer({"bootstrap.servers": secure.sasl, **scram(secure), "group.id": group,
                  "group.protocol": "classic", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        c.close()
    rows = json.loads(admin.ok("consumer-groups", "--describe", "--group", group, "--output",
                               "json"))
    assert [(r["topic"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows] == \
        [(topic, 4, 10, 6)]
    assert admin.ok("consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
                    "--to-offset", "7", "--execute", "--export") == f"{topic},0,7\n"
    assert [r["lag"] for r in json.loads(admin.ok(
        "consumer-groups", "--describe", "--group", group, "--output", "json"))] == [3]
    # A user who may describe the topic but not the group learns nothing about it.
    admin.ok("users", "--add", "--name", "erin", "--mechanism", "SCRAM-SHA-256", "--password",
             "erin-secret")
    admin.ok("acls", "--add", "--allow-principal", "User:erin", "--operation", "Describe",
             "--topic", topic)
    erin = SecureCli(secure.sasl, properties(secure, "erin.properties", (
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=erin\n"
        f"sasl.password=erin-secret\nssl.ca.location={secure.ca}\n")))
    assert group not in erin.ok("consumer-groups", "--list")
    err = erin.fails("consumer-groups", "--describe", "--group", group)
    assert err == ("shoal consumer-groups: cannot find the coordinator of group "
                   f"'{group}': GROUP_AUTHORIZATION_FAILED: User:erin is not authorized to "
                   f"DESCRIBE group '{group}'; an ACL '--allow-principal User:erin --operation "
                   f"DESCRIBE --group {group}' allows it (CreateAcls: kafka-acls.sh --add, or "
                   "the shoal CLI's acls verb)\n")
    err = erin.fails("consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
                     "--to-earliest", "--execute")
    assert "GROUP_AUTHORIZATION_FAILED" in err, err
    admin.ok("users", "--delete", "--name", "erin", "--mechanism", "SCRAM-SHA-256")


@pytest.mark.parametrize(("props", "message"), [
    ("sasl.password=wrong\n", "SASL SCRAM-SHA-256 authentication to 127.0.0.1:{port} failed: "
                              "SASL_AUTHENTICATION_FAILED: Authentication failed"),
    ("sasl.mechanism=OAUTHBEARER\n", "sasl.mechanism 'OAUTHBEARER' is not supported"),
    ("ssl.ca.location={other_ca}\n", "the broker's certificate did not verify"),
], ids=["bad-password", "unsupported-mechanism", "untrusted-broker"])
def test_cli_security_failures_are_one_line(secure: Secure, extra_certs: Path, props: str,
                                            message: str) -> None:
    base = scram(secure)
    lines = "".join(f"{k}={v}\n" for k, v in base.items())
    text = lines + props.format(other_ca=extra_certs / "other-ca.pem")
    cli = SecureCli(secure.sasl, properties(secure, "failing.properties", text))
    r = cli.run("topics", "--list")
    assert r.returncode in (1, 2) and r.stdout == "", r
    assert r.stderr.count("\n") == 1, r.stderr
    assert message.format(port=secure.sasl.rsplit(":", 1)[1]) in r.stderr
    assert "wrong" not in r.stderr and "admin-secret" not in r.stderr


def test_cli_with_a_client_certificate_is_that_principal(secure: Secure, admin: SecureCli,
                                                         extra_certs: Path) -> None:
    principal = f"User:{CLIENT_DN}"
    admin.ok("acls", "--add", "--allow-principal", principal, "--operation", "Describe",
             "--cluster")
    try:
        for name, props in (
                ("mtls.properties", f"security.protocol=SSL\nssl.ca.location={secure.ca}\n"
                                    f"ssl.certificate.location={secure.client_cert}\n"
                                    f"ssl.key.location={secure.client_key}\n"),
                ("mtls-java.properties",
                 "security.protocol=SSL\nssl.truststore.type=PEM\n"
                 f"ssl.truststore.location={secure.ca}\nssl.keystore.type=PEM\n"
                 f"ssl.keystore.location={extra_certs / 'client-keystore.pem'}\n")):
            cli = SecureCli(secure.ssl, properties(secure, name, props))
            listed = json.loads(cli.ok("acls", "--list", "--cluster", "--principal", principal,
                                       "--output", "json"))
            assert [a["principal"] for a in listed] == [principal]
            # Only DESCRIBE was granted; the refusal names the certificate's principal.
            err = cli.fails("acls", "--add", "--allow-principal", "User:x", "--topic", "t")
            assert "CLUSTER_AUTHORIZATION_FAILED" in err and principal in err
        # Without a certificate the SSL listener (client auth required) refuses the handshake.
        bare = SecureCli(secure.ssl, properties(secure,
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
                          config=scram(secure, "alice", "alice-secret", "SCRAM-SHA-512"))
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
        assert sorted(r.value or b"" for r in got) == sorted(sent)
    finally:
        await second.close()


async def test_share_consumer_with_a_wrong_password_fails_to_start(secure: Secure) -> None:
    c = ShareConsumer(secure.sasl, "secure-nobody",
                      config=scram(secure, "admin", "not-the-password"))
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
