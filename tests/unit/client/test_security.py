"""Client security without a broker: properties, JAAS, settings, the librdkafka translation, the
SASL exchange against the broker's own SASL core (scramp on both sides), TLS contexts through an
in-memory handshake with a CA made at test time, and the CLI's SCRAM salting."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import scramp
import trustme
from kio.schema.errors import ErrorCode

from cli.users import (
    MECHANISMS,
    parse_scram_config,
    salted_password,
    split_outside_brackets,
)
from client.admin_wire import CliError
from broker.security.sasl import Authenticator, SaslServerConfig
from broker.security.scram_store import ScramCredential, credential_from_salted_password
from client.errors import KafkaError
from client.core.sasl import SaslExchange
from client.core.tls import ssl_context
from client.security import (
    SecurityConfigError,
    SecuritySettings,
    librdkafka_config,
    parse_jaas_options,
    parse_properties,
)
from protocol.codec import response_module

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="alice" password="alice-secret";')

# ------------------------------------------------------------------------ properties and JAAS

PROPERTIES = [
    ("a=1\nb = 2\n", {"a": "1", "b": "2"}),
    ("# comment\n! also\n\n  c: 3\n", {"c": "3"}),
    ("sasl.jaas.config=M required username=\"u\" password=\"p=q\";\n",
     {"sasl.jaas.config": 'M required username="u" password="p=q";'}),
    ("long=one \\\n    two\n", {"long": "one two"}),
    ("path=C:\\\\x\n", {"path": "C:\\\\x"}),
    ("empty=\n", {"empty": ""}),
]


@pytest.mark.parametrize(("text", "expected"), PROPERTIES,
                         ids=["plain", "comments-colon", "jaas", "continuation",
                              "escaped-backslash", "empty"])
def test_parse_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_jaas_options() -> None:
    assert parse_jaas_options(SCRAM_JAAS) == {"username": "alice", "password": "alice-secret"}
    assert parse_jaas_options('M required a="x\\"y" b=bare c="semi;colon";') == {
        "a": 'x"y', "b": "bare", "c": "semi;colon"}
    with pytest.raises(SecurityConfigError, match="must look like"):
        parse_jaas_options('username="a" password="b"')


# ------------------------------------------------------------------------------- settings


def test_default_is_plaintext() -> None:
    s = SecuritySettings.from_properties({"bootstrap.servers": "h:1", "client.id": "x"})
    assert (s.protocol, s.uses_tls, s.uses_sasl) == ("PLAINTEXT", False, False)
    assert ssl_context(s) is None


def test_librdkafka_and_java_names_read_the_same() -> None:
    librdkafka = SecuritySettings.from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-256",
        "sasl.username": "alice", "sasl.password": "alice-secret",
        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem", "ssl.key.password": "kp"})
    java = SecuritySettings.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/c.pem", "ssl.key.password": "kp"})
    assert librdkafka.protocol == java.protocol == "SASL_SSL"
    assert (librdkafka.sasl_username, librdkafka.sasl_password) == ("alice", "alice-secret")
    assert (java.sasl_username, java.sasl_password) == ("alice", "alice-secret")
    assert java.ssl_ca_location == "/ca.pem" and java.ssl_certificate_location == "/c.pem"
    assert java.ssl_key_location is None  # the PEM keystore holds the key too
    assert "alice-secret" not in repr(librdkafka) and "kp" not in repr(librdkafka)


def test_endpoint_identification() -> None:
    base = {"security.protocol": "SSL"}
    assert SecuritySettings.from_properties(base).check_hostname
    assert not SecuritySettings.from_properties(
        {**base, "ssl.endpoint.identification.algorithm": ""}).check_hostname
    assert not SecuritySettings.from_properties(
        {**base, "ssl.endpoint.identification.algorithm": "none"}).check_hostname
    s = SecuritySettings.from_properties({**base, "enable.ssl.certificate.verification": "false"})
    ctx = ssl_context(s)
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


BAD_SETTINGS = [
    ({"security.protocol": "TLS"}, "must be one of PLAINTEXT"),
    ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "'GSSAPI' is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "needs a user name and password"),
    ({"ssl.keystore.type": "PKCS12"}, "reads PEM files only"),
    ({"ssl.keystore.pasword": "x"}, "'ssl.keystore.pasword' is not supported"),
    ({"ssl.endpoint.identification.algorithm": "http"}, "must be https or none"),
    ({"sasl.jaas.config": "username=u"}, "must look like"),
    ({"ssl.key.location": "/k.pem"}, "needs ssl.certificate.location"),
    ({"enable.ssl.certificate.verification": "maybe"}, "must be true or false"),
]


@pytest.mark.parametrize(("props", "message"), BAD_SETTINGS,
                         ids=[m for _, m in BAD_SETTINGS])
def test_bad_settings_name_the_property(props: dict[str, str], message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message) as ei:
        SecuritySettings.from_properties({"sasl.password": "hunter2", **props})
    assert "hunter2" not in str(ei.value)


def test_from_options_keywords_win_and_only_take_security_names() -> None:
    s = SecuritySettings.from_options(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
         "sasl.username": "a", "sasl.password": "x"},
        sasl_username="b", sasl_mechanism=None)
    assert (s.sasl_username, s.sasl_mechanism) == ("b", "PLAIN")
    with pytest.raises(SecurityConfigError, match="'group.id' is not a security property"):
        SecuritySettings.from_options({"group.id": "g"})
    with pytest.raises(SecurityConfigError, match="unknown security setting 'linger_ms'"):
        SecuritySettings.from_options(linger_ms=5)


def test_librdkafka_translation() -> None:
    assert librdkafka_config({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/me.pem", "ssl.keystore.password": "kp",
        "linger.ms": "5"}) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "alice-secret",
        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/me.pem",
        "ssl.key.location": "/me.pem", "ssl.key.password": "kp", "linger.ms": "5"}
    # librdkafka's own PKCS#12 keystore stays as it is; explicit names win over the JAAS line.
    assert librdkafka_config({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                              "sasl.username": "bob", "sasl.jaas.config": SCRAM_JAAS}) == {
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
        "sasl.username": "bob", "sasl.password": "alice-secret"}


# ------------------------------------------------------------------------------ SASL exchange

RANGES = {17: (0, 1), 36: (0, 2)}
USERS = {"alice": "alice-secret"}


def _server(mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
            ) -> Authenticator:
    creds: dict[tuple[str, str], ScramCredential] = {}
    for user, password in USERS.items():
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            salt = b"s" * 32
            creds[(user, mech)] = credential_from_salted_password(
                mech, salt, salted_password(mech, password, salt, 4096), 4096)
    return Authenticator(SaslServerConfig(mechanisms, dict(USERS)),
                         lambda user, mech: creds.get((user, mech)))


def _run(settings: SecuritySettings, server: Authenticator,
         tamper: Callable[[bytes], bytes] = lambda b: b) -> list[int]:
    """Drive the exchange against ``server``; the api keys sent, in order."""
    exchange = SaslExchange(settings, RANGES)
    sent = []
    while (req := exchange.next_request()) is not None:
        api_key, version, body = req
        sent.append(api_key)
        m = response_module(api_key, version)
        if api_key == 17:
            code = server.handshake(body.mechanism)
            exchange.receive(m.SaslHandshakeResponse(error_code=code,
                                                     mechanisms=server.mechanisms))
            continue
        step = server.step(body.auth_bytes)
        error = step.error
        exchange.receive(m.SaslAuthenticateResponse(
            error_code=error.code if error else ErrorCode.none,
            error_message=error.message if error else None,
            auth_bytes=tamper(step.response or b"")))
    assert exchange.done
    return sent


def _sasl(mechanism: str, password: str = "alice-secret", user: str = "alice"
          ) -> SecuritySettings:
    return SecuritySettings.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
        "sasl.username": user, "sasl.password": password})


@pytest.mark.parametrize(("mechanism", "round_trips"), [
    ("PLAIN", [17, 36]), ("SCRAM-SHA-256", [17, 36, 36]), ("SCRAM-SHA-512", [17, 36, 36])])
def test_sasl_exchange_logs_in(mechanism: str, round_trips: list[int]) -> None:
    server = _server()
    assert _run(_sasl(mechanism), server) == round_trips
    assert server.principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_sasl_authentication_failed(mechanism: str) -> None:
    with pytest.raises(KafkaError) as ei:
        _run(_sasl(mechanism, password="wrong"), _server())
    assert ei.value.code == ErrorCode.sasl_authentication_failed
    assert "wrong" not in str(ei.value)


def test_scram_checks_the_server_signature() -> None:
    def forge(final: bytes) -> bytes:
        return final[:-4] + (b"AAA=" if not final.endswith(b"AAA=") else b"BBB=")

    with pytest.raises(KafkaError, match="did not verify") as ei:
        _run(_sasl("SCRAM-SHA-256"), _server(),
             tamper=lambda b: forge(b) if b.startswith(b"v=") else b)
    assert ei.value.code == ErrorCode.sasl_authentication_failed


def test_unsupported_mechanism_names_what_the_listener_offers() -> None:
    with pytest.raises(KafkaError, match=r"offers: PLAIN\)") as ei:
        _run(_sasl("SCRAM-SHA-512"), _server(("PLAIN",)))
    assert ei.value.code == ErrorCode.unsupported_sasl_mechanism


def test_sasl_needs_the_rpcs() -> None:
    with pytest.raises(KafkaError, match="does its listener have SASL enabled"):
        SaslExchange(_sasl("PLAIN"), {17: (0, 1)})
    with pytest.raises(SecurityConfigError, match="uses no SASL"):
        SaslExchange(SecuritySettings(), RANGES)


def test_one_request_at_a_time() -> None:
    exchange = SaslExchange(_sasl("PLAIN"), RANGES)
    assert exchange.next_request() is not None
    assert exchange.next_request() is None  # the handshake's answer is still awaited
    with pytest.raises(RuntimeError):
        SaslExchange(_sasl("PLAIN"), RANGES).receive(object())


# ---------------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext, hostname: str) -> Any:
    """A TLS handshake over memory BIOs; the server's view of the client certificate."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, side in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return s.getpeercert()
    raise AssertionError("handshake did not finish")


def _server_ctx(ca: trustme.CA, require_client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    if require_client_cert:
        ca.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _client(tmp_path: Path, ca: trustme.CA, **props: str) -> ssl.SSLContext:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ctx = ssl_context(SecuritySettings.from_properties(
        {"security.protocol": "SSL", "ssl.ca.location": str(ca_file), **props}))
    assert ctx is not None
    return ctx


def test_tls_verifies_the_broker_and_its_name(tmp_path: Path, ca: trustme.CA) -> None:
    _handshake(_client(tmp_path, ca), _server_ctx(ca), "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
        _handshake(_client(tmp_path, ca), _server_ctx(ca), "broker.example")
    # Without endpoint identification the name is not checked, the chain still is.
    _handshake(_client(tmp_path, ca, **{"ssl.endpoint.identification.algorithm": "none"}),
               _server_ctx(ca), "broker.example")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(_client(tmp_path, ca), _server_ctx(trustme.CA()), "127.0.0.1")


@pytest.mark.parametrize("form", ["separate-files", "keystore"])
def test_tls_client_certificate(tmp_path: Path, ca: trustme.CA, form: str) -> None:
    leaf = ca.issue_cert("alice@example.com", common_name="alice-cert")
    key, chain = tmp_path / "key.pem", tmp_path / "chain.pem"
    leaf.private_key_pem.write_to_path(str(key))
    leaf.cert_chain_pems[0].write_to_path(str(chain))
    if form == "keystore":  # Java's PEM keystore: key and chain in one file
        both = tmp_path / "keystore.pem"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(both))
        props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(both)}
    else:
        props = {"ssl.certificate.location": str(chain), "ssl.key.location": str(key)}
    peer = _handshake(_client(tmp_path, ca, **props), _server_ctx(ca, True), "127.0.0.1")
    assert ((("commonName", "alice-cert"),) in peer["subject"])


def test_tls_bad_files_name_the_property(tmp_path: Path, ca: trustme.CA) -> None:
    with pytest.raises(SecurityConfigError, match="ssl.ca.location=/nowhere/ca.pem"):
        ssl_context(SecuritySettings.from_properties(
            {"security.protocol": "SSL", "ssl.ca.location": "/nowhere/ca.pem"}))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(SecurityConfigError, match="client certificate"):
        _client(tmp_path, ca, **{"ssl.certificate.location": str(junk)})


# ------------------------------------------------------------------------- CLI SCRAM salting


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_salted_password_is_what_scramp_derives(mechanism: str) -> None:
    salt = bytes(range(64))
    ours = credential_from_salted_password(mechanism, salt,
                                           salted_password(mechanism, "pw", salt, 8192), 8192)
    _, stored_key, server_key, _ = scramp.ScramMechanism(mechanism).make_auth_info(
        "pw", iteration_count=8192, salt=salt)
    assert (ours.stored_key, ours.server_key) == (stored_key, server_key)


def test_kafka_configs_scram_syntax() -> None:
    assert split_outside_brackets(
        "SCRAM-SHA-256=[iterations=8192,password=a],SCRAM-SHA-512=[password=b]") == [
        "SCRAM-SHA-256=[iterations=8192,password=a]", "SCRAM-SHA-512=[password=b]"]
    u = parse_scram_config("alice", "scram-sha-256=[iterations=8192,password=alice-secret]")
    assert (u.name, u.mechanism, u.iterations, u.password) == (
        "alice", "SCRAM-SHA-256", 8192, "alice-secret")
    assert "alice-secret" not in repr(u)
    assert parse_scram_config("a", "SCRAM-SHA-512=[password=x]").iterations == 4096
    for bad, message in [("SCRAM-SHA-1=[password=x]", "not 'SCRAM-SHA-1'"),
                         ("SCRAM-SHA-256=password=x", r"use .SCRAM-SHA-256=\["),
                         ("SCRAM-SHA-256=[iterations=8192]", "needs password"),
                         ("SCRAM-SHA-256=[iterations=99,password=x]", "between 4096"),
                         ("SCRAM-SHA-256=[salt=x,password=x]", "unknown SCRAM-SHA-256 setting")]:
        with pytest.raises(CliError, match=message):
            parse_scram_config("a", bad)


# ------------------------------------------------------------------- ShareConsumer settings


def test_share_consumer_takes_kafka_names_or_keywords() -> None:
    from client import ShareConsumer

    c = ShareConsumer("h:1", "g", config={"security.protocol": "SASL_SSL",
                                          "sasl.mechanism": "PLAIN", "sasl.username": "a",
                                          "sasl.password": "x"}, sasl_username="b")
    settings = c._cluster._security  # what every BrokerConnection of the consumer uses
    assert settings is not None
    assert (settings.protocol, settings.sasl_username) == ("SASL_SSL", "b")
    with pytest.raises(SecurityConfigError, match="'group.id' is not a security property"):
        ShareConsumer("h:1", "g", config={"group.id": "g"})
    with pytest.raises(SecurityConfigError, match="needs sasl.mechanism"):
        ShareConsumer("h:1", "g", security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ValueError, match="not both"):
        ShareConsumer("h:1", "g", security=SecuritySettings(), config={})
