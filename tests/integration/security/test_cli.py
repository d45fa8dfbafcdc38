"""Golden tests of ``shoal acls`` and ``shoal users`` (and ``configs --entity-type users``), run
as subprocesses against a broker with the ACL authorizer.

Over PLAINTEXT every connection is ``User:ANONYMOUS``, made a super user here so it may manage
ACLs and credentials. ACL names are fixed per test so outputs are literal; each test lists only
the resources it made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import scramp

from broker.security.sasl import Authenticator, SaslServerConfig
from broker.security.scram_store import ScramStore
from tests.conftest import BrokerProcess
from tests.integration.admin.test_cli import Cli

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SECURED = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acl-broker") / "data", SECURED)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def cli(secured: BrokerProcess) -> Cli:
    return Cli(secured.bootstrap)


def acl(resource: str, name: str, pattern: str, principal: str, host: str, op: str,
        permission: str) -> dict[str, str]:
    return {"resource_type": resource, "resource_name": name, "pattern_type": pattern,
            "principal": principal, "host": host, "operation": op, "permission_type": permission}


# --------------------------------------------------------------------------------- acls


def test_add_list_and_remove_acls_for_a_share_consumer(cli: Cli) -> None:
    out = cli.ok("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                 "--topic", "sec-orders", "--group", "sec-workers")
    assert out == (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=sec-orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Adding ACLs for resource `ResourcePattern(resourceType=GROUP, name=sec-workers, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=sec-orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=sec-workers, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n")
    # Adding the same ACL again changes nothing; a DENY and a second host join it.
    cli.ok("acls", "--add", "--allow-principal", "User:alice", "--operation", "read",
           "--topic", "sec-orders")
    cli.ok("acls", "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
           "--operation", "READ", "--operation", "DESCRIBE", "--topic", "sec-orders")
    listing = cli.ok("acls", "--list", "--topic", "sec-orders")
    assert listing == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=sec-orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:mallory, host=10.0.0.9, operation=READ, permissionType=DENY)\n"
        "\t(principal=User:mallory, host=10.0.0.9, operation=DESCRIBE, permissionType=DENY)\n\n")
    assert json.loads(cli.ok("acls", "--list", "--topic", "sec-orders", "--principal",
                             "User:mallory", "--output", "json")) == [
        acl("TOPIC", "sec-orders", "LITERAL", "User:mallory", "10.0.0.9", "READ", "DENY"),
        acl("TOPIC", "sec-orders", "LITERAL", "User:mallory", "10.0.0.9", "DESCRIBE", "DENY")]

    # Remove mallory's ACLs (any operation, any host) without a prompt: stdin is not a TTY.
    assert json.loads(cli.ok("acls", "--remove", "--deny-principal", "User:mallory",
                             "--topic", "sec-orders", "--output", "json")) == {"removed": [
        acl("TOPIC", "sec-orders", "LITERAL", "User:mallory", "10.0.0.9", "READ", "DENY"),
        acl("TOPIC", "sec-orders", "LITERAL", "User:mallory", "10.0.0.9", "DESCRIBE", "DENY")]}
    # Everything on both resources, with --force.
    assert cli.ok("acls", "--remove", "--topic", "sec-orders", "--group", "sec-workers",
                  "--force") == (
        "Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, name=sec-orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Removed ACLs for resource `ResourcePattern(resourceType=GROUP, name=sec-workers, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n")
    assert cli.ok("acls", "--list", "--topic", "sec-orders", "--group", "sec-workers") == ""
    assert cli.ok("acls", "--remove", "--topic", "sec-orders", "--force") == \
        "No ACLs matched; nothing was removed.\n"


def test_prefixed_cluster_and_transactional_id_acls_and_pattern_filters(cli: Cli) -> None:
    added = json.loads(cli.ok(
        "acls", "--add", "--allow-principal", "User:etl", "--allow-principal", "User:ops",
        "--operation", "Write", "--topic", "sec-pre-", "--transactional-id", "sec-pre-",
        "--resource-pattern-type", "PREFIXED", "--output", "json"))
    assert added == {"added": [
        acl("TOPIC", "sec-pre-", "PREFIXED", "User:etl", "*", "WRITE", "ALLOW"),
        acl("TOPIC", "sec-pre-", "PREFIXED", "User:ops", "*", "WRITE", "ALLOW"),
        acl("TRANSACTIONAL_ID", "sec-pre-", "PREFIXED", "User:etl", "*", "WRITE", "ALLOW"),
        acl("TRANSACTIONAL_ID", "sec-pre-", "PREFIXED", "User:ops", "*", "WRITE", "ALLOW")]}
    cli.ok("acls", "--add", "--allow-principal", "User:etl", "--operation", "Describe",
           "--topic", "sec-pre-x")
    cli.ok("acls", "--add", "--allow-principal", "User:ops", "--operation", "IdempotentWrite",
           "--operation", "cluster_action", "--cluster")
    # LITERAL (the default) sees only the literal pattern; MATCH every ACL that applies.
    literal = json.loads(cli.ok("acls", "--list", "--topic", "sec-pre-x", "--output", "json"))
    assert literal == [acl("TOPIC", "sec-pre-x", "LITERAL", "User:etl", "*", "DESCRIBE",
                           "ALLOW")]
    match = json.loads(cli.ok("acls", "--list", "--topic", "sec-pre-x",
                              "--resource-pattern-type", "match", "--output", "json"))
    assert [(a["resource_name"], a["pattern_type"], a["principal"]) for a in match] == [
        ("sec-pre-", "PREFIXED", "User:etl"), ("sec-pre-", "PREFIXED", "User:ops"),
        ("sec-pre-x", "LITERAL", "User:etl")]
    cluster = json.loads(cli.ok("acls", "--list", "--cluster", "--output", "json"))
    assert cluster == [
        acl("CLUSTER", "kafka-cluster", "LITERAL", "User:ops", "*", "CLUSTER_ACTION", "ALLOW"),
        acl("CLUSTER", "kafka-cluster", "LITERAL", "User:ops", "*", "IDEMPOTENT_WRITE",
            "ALLOW")]
    everything = json.loads(cli.ok("acls", "--list", "--output", "json"))
    assert all(a in everything for a in added["added"] + literal + cluster)
    # Remove by pattern type ANY: both patterns named sec-pre- of the transactional id.
    removed = json.loads(cli.ok("acls", "--remove", "--transactional-id", "sec-pre-",
                                "--resource-pattern-type", "any", "--output", "json"))
    assert [a["principal"] for a in removed["removed"]] == ["User:etl", "User:ops"]
    cli.ok("acls", "--remove", "--topic", "sec-pre-", "--resource-pattern-type", "prefixed",
           "--force")
    cli.ok("acls", "--remove", "--topic", "sec-pre-x", "--cluster", "--force")
    assert json.loads(cli.ok("acls", "--list", "--output", "json")) == []


BAD_ACL_USAGE = [
    (("--add", "--topic", "t"), "--add needs --allow-principal or --deny-principal"),
    (("--add", "--allow-principal", "User:a"), "--add needs a resource"),
    (("--add", "--allow-principal", "alice", "--topic", "t"),
     "principal 'alice' is not of the form Type:name"),
    (("--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"),
     "unknown --operation 'Fly'"),
    (("--add", "--allow-principal", "User:a", "--operation", "ClusterAction", "--topic", "t"),
     "TOPIC ACLs do not support operation ClusterAction"),
    (("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
      "match"), "not valid with --add"),
    (("--list", "--allow-principal", "User:a"), "--list takes --principal"),
    (("--remove", "--topic", "t", "--principal", "User:a"), "--principal is a --list filter"),
    (("--add", "--allow-host", "h", "--topic", "t", "--deny-principal", "User:a"),
     "--allow-host needs --allow-principal"),
]


@pytest.mark.parametrize(("args", "message"), BAD_ACL_USAGE, ids=[m for _, m in BAD_ACL_USAGE])
def test_acl_usage_errors_are_one_line(cli: Cli, args: tuple[str, ...], message: str) -> None:
    err = cli.fails("acls", *args, code=2)
    assert err.startswith("shoal acls: ") and message in err


def test_acls_without_an_authorizer_say_how_to_enable_it(broker: BrokerProcess) -> None:
    err = Cli(broker.bootstrap).fails("acls", "--list")
    assert err.startswith("shoal acls: cannot list ACLs: SECURITY_DISABLED: ")
    assert err.endswith("set authorizer.class.name="
                        "org.apache.kafka.metadata.authorizer.StandardAuthorizer to enable them\n")
    assert err.count("authorizer.class.name") == 1  # the advice once, not the broker's and ours


# -------------------------------------------------------------------------------- users


def login(store: ScramStore, mechanism: str, user: str, password: str) -> str | None:
    """Log in through the broker's SCRAM core with scramp's client."""
    a = Authenticator(SaslServerConfig((mechanism,)), store.lookup)
    a.handshake(mechanism)
    client = scramp.ScramClient([mechanism], user, password)
    first = a.step(client.get_client_first().encode())
    if first.error is not None or first.response is None:
        return None
    client.set_server_first(first.response.decode())
    return a.step(client.get_client_final().encode()).principal


def test_users_add_describe_delete_and_log_in(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", SECURED)
    b.start()
    try:
        cli = Cli(b.bootstrap)
        assert cli.ok("users", "--describe") == "USER MECHANISM ITERATIONS\n"
        assert cli.ok("users", "--add", "--name", "alice", "--mechanism", "SCRAM-SHA-256",
                      "--password", "alice-secret", "--iterations", "8192") == \
            "Completed updating config for user alice.\n"
        pw = tmp_path / "bob.pw"
        pw.write_text("bob-secret\n")
        assert json.loads(cli.ok("users", "--add", "--name", "bob", "--mechanism",
                                 "scram-sha-512", "--password-file", str(pw), "--output",
                                 "json")) == {"user": "bob", "mechanism": "SCRAM-SHA-512",
                                              "action": "added", "iterations": 4096}
        # kafka-configs.sh's form: two mechanisms in one --add-config.
        assert cli.ok("configs", "--entity-type", "users", "--entity-name", "carol", "--alter",
                      "--add-config", "SCRAM-SHA-256=[iterations=5000,password=carol-secret],"
                      "SCRAM-SHA-512=[password=carol-secret]") == \
            "Completed updating config for user carol.\n"
        assert cli.ok("users", "--describe") == (
            "USER  MECHANISM     ITERATIONS\n"
            "alice SCRAM-SHA-256 8192\n"
            "bob   SCRAM-SHA-512 4096\n"
            "carol SCRAM-SHA-256 5000\n"
            "carol SCRAM-SHA-512 4096\n")
        assert json.loads(cli.ok("configs", "--entity-type", "users", "--entity-name", "carol",
                                 "--describe", "--output", "json")) == [
            {"user": "carol", "mechanism": "SCRAM-SHA-256", "iterations": 5000},
            {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 4096}]
        r = cli.run("users", "--describe", "--name", "alice", "--name", "nobody")
        assert (r.returncode, r.stdout) == (1, "USER  MECHANISM     ITERATIONS\n"
                                               "alice SCRAM-SHA-256 8192\n")
        assert r.stderr.startswith("shoal users: user 'nobody': RESOURCE_NOT_FOUND")

        assert cli.ok("users", "--delete", "--name", "carol", "--mechanism",
                      "SCRAM-SHA-512") == "Completed updating config for user carol.\n"
        cli.ok("configs", "--entity-type", "users", "--entity-name", "carol", "--alter",
               "--delete-config", "SCRAM-SHA-256")
        err = cli.fails("users", "--delete", "--name", "carol", "--mechanism", "SCRAM-SHA-256")
        assert err.startswith("shoal users: cannot update the SCRAM credentials of user "
                              "'carol': RESOURCE_NOT_FOUND")
        assert [u["user"] for u in json.loads(cli.ok("users", "--describe", "--output",
                                                     "json"))] == ["alice", "bob"]
        # Passwords are never echoed or logged.
        assert "secret" not in b.logs()
    finally:
        b.stop()
    # What the CLI salted is what the broker's SCRAM server checks.
    store = ScramStore.open(b.data_dir)
    assert login(store, "SCRAM-SHA-256", "alice", "alice-secret") == "User:alice"
    assert login(store, "SCRAM-SHA-256", "alice", "wrong") is None
    assert login(store, "SCRAM-SHA-512", "bob", "bob-secret") == "User:bob"


BAD_USER_USAGE = [
    (("users", "--add", "--name", "a", "--password", "pw-s3cret"), "--add needs --mechanism"),
    (("users", "--add", "--mechanism", "SCRAM-SHA-256", "--password", "pw-s3cret"),
     "--add needs exactly one --name"),
    (("users", "--add", "--name", "a", "--mechanism", "SCRAM-SHA-256", "--password", "pw-s3cret",
      "--iterations", "100"), "--iterations must be between 4096 and 16384"),
    (("users", "--add", "--name", "a", "--mechanism", "SCRAM-SHA-256"),
     "--add needs --password or --password-file"),
    (("users", "--describe", "--password", "pw-s3cret"), "--password only applies to --add"),
    (("configs", "--entity-type", "users", "--entity-name", "a", "--alter", "--add-config",
      "SCRAM-SHA-256=[iterations=8192]"), "SCRAM-SHA-256 needs password=..."),
    (("configs", "--entity-type", "users", "--alter", "--delete-config", "SCRAM-SHA-256"),
     "needs --entity-name"),
    (("configs", "--entity-type", "topics", "--describe"), "needs --entity-name"),
]


@pytest.mark.parametrize(("args", "message"), BAD_USER_USAGE,
                         ids=[m for _, m in BAD_USER_USAGE])
def test_user_usage_errors_are_one_line(cli: Cli, args: tuple[str, ...], message: str) -> None:
    err = cli.fails(*args, code=2)
    assert message in err and "s3cret" not in err


# ----------------------------------------------------------------------- --command-config


def test_command_config_errors(cli: Cli, tmp_path: Path) -> None:
    missing = cli.fails("topics", "--list", "--command-config", str(tmp_path / "nope"), code=2)
    assert missing.startswith(f"shoal topics: cannot read --command-config {tmp_path}/nope")
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.password=hunter2\n")
    err = cli.fails("acls", "--list", "--command-config", str(bad), code=2)
    assert "needs sasl.mechanism" in err and "hunter2" not in err
    plain = tmp_path / "plain.properties"
    plain.write_text("# nothing secure\nsecurity.protocol=PLAINTEXT\nrequest.timeout.ms=5000\n")
    assert cli.ok("acls", "--list", "--topic", "sec-none", "--command-config", str(plain)) == ""
    # TLS towards a plaintext listener fails on one line and names the likely cause.
    tls = tmp_path / "tls.properties"
    tls.write_text("security.protocol=SSL\n")
    err = cli.fails("acls", "--list", "--command-config", str(tls))
    assert err.startswith("shoal acls: TLS to 127.0.0.1:") and "is this a TLS listener" in err
