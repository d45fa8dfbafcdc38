"""SASL cores without an event loop: the JAAS parser, the PLAIN and SCRAM state machines (SCRAM
driven by scramp's client), and the per-listener SASL settings."""

from __future__ import annotations

import pytest
import scramp
from kio.schema.errors import ErrorCode

from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.sasl import (
    Authenticator,
    AuthError,
    SaslConfigError,
    SaslServerConfig,
    State,
    StepResult,
)
from broker.security.scram_store import ScramCredential, credential_from_password

PLAIN_LINE = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')

# ----------------------------------------------------------------------------------- JAAS


def test_plain_jaas_line() -> None:
    e = parse_jaas_config(PLAIN_LINE)
    assert e.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert e.flag == "required"
    assert e.options["username"] == "admin"
    assert e.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}


def test_scram_jaas_line_and_escapes() -> None:
    e = parse_jaas_config('org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED;')
    assert (e.flag, dict(e.options)) == ("required", {})
    e = parse_jaas_config('M optional a="x\\"y\\\\z" b=bare c="semi;colon = sign" ;')
    assert dict(e.options) == {"a": 'x"y\\z', "b": "bare", "c": "semi;colon = sign"}


BAD_JAAS = [
    ("", "is empty"),
    ("M;", "control flag"),
    ("M maybe;", "control flag"),
    ("M required a=1", "must end with ';'"),
    ('M required a="open;', "not closed"),
    ("M required a=;", "expected name=value"),
    ("M required a=1 a=2;", "given twice"),
    ("M required; N required;", "exactly one login module"),
    ("= required;", "class name first"),
]


@pytest.mark.parametrize(("text", "message"), BAD_JAAS, ids=[m for _, m in BAD_JAAS])
def test_bad_jaas(text: str, message: str) -> None:
    with pytest.raises(JaasError, match=message):
        parse_jaas_config(text, "listener.name.x.plain.sasl.jaas.config")


def test_jaas_errors_do_not_quote_values() -> None:
    with pytest.raises(JaasError) as info:
        parse_jaas_config('M required user_bob="s3cr3t" oops;')
    assert "s3cr3t" not in str(info.value)


# ------------------------------------------------------------------------------- settings

def test_listener_settings_from_kafka_config() -> None:
    config = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
              "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_LINE,
              "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                  "org.apache.kafka.common.security.scram.ScramLoginModule required;"}
    s = SaslServerConfig.from_config(config, "SASL_SSL")
    assert s.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert s.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    # The un-prefixed sasl.jaas.config serves listeners without their own.
    s = SaslServerConfig.from_config({"sasl.enabled.mechanisms": "PLAIN",
                                      "sasl.jaas.config": PLAIN_LINE}, "OTHER")
    assert set(s.plain_users) == {"admin", "alice"}
    # Per-listener mechanisms.
    s = SaslServerConfig.from_config({"sasl.enabled.mechanisms": "PLAIN",
                                      "listener.name.x.sasl.enabled.mechanisms": "SCRAM-SHA-512"},
                                     "X")
    assert s.mechanisms == ("SCRAM-SHA-512",)


BAD_SETTINGS = [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI not supported by Shoal"),
    ({"sasl.enabled.mechanisms": ""}, "is empty"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "needs listener.name.l.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "M required;"},
     "PLAIN needs org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.jaas.config": "broken"},
     "control flag"),
]


@pytest.mark.parametrize(("config", "message"), BAD_SETTINGS, ids=[m for _, m in BAD_SETTINGS])
def test_bad_listener_settings(config: dict[str, str], message: str) -> None:
    with pytest.raises(SaslConfigError, match=message):
        SaslServerConfig.from_config(config, "L")


# ---------------------------------------------------------------------------------- PLAIN

def _plain() -> Authenticator:
    a = Authenticator(SaslServerConfig(("PLAIN", "SCRAM-SHA-256"),
                                       {"alice": "alice-secret", "admin": "admin-secret"}),
                      lambda user, mech: None)
    assert a.handshake("PLAIN") == ErrorCode.none
    return a


PLAIN_CASES = [
    ("good", b"\x00alice\x00alice-secret", "User:alice"),
    ("authzid equal to user", b"alice\x00alice\x00alice-secret", "User:alice"),
    ("wrong password", b"\x00alice\x00nope", None),
    ("unknown user", b"\x00mallory\x00alice-secret", None),
    ("authzid mismatch", b"admin\x00alice\x00alice-secret", None),
    ("two tokens", b"alice\x00alice-secret", None),
    ("empty user", b"\x00\x00alice-secret", None),
    ("empty password", b"\x00alice\x00", None),
    ("not utf-8", b"\x00al\xffice\x00alice-secret", None),
]


@pytest.mark.parametrize(("case", "data", "principal"), PLAIN_CASES,
                         ids=[c[0] for c in PLAIN_CASES])
def test_plain(case: str, data: bytes, principal: str | None) -> None:
    a = _plain()
    r = a.step(data)
    assert r.done
    if principal is not None:
        assert r == StepResult(b"", True, principal, None)
        assert a.state == State.AUTHENTICATED and a.principal == principal
    else:
        assert r.principal is None and r.response is None and r.error is not None
        assert r.error.code == ErrorCode.sasl_authentication_failed
        assert r.error.message == ("Authentication failed: invalid credentials for SASL "
                                   "mechanism PLAIN")
        assert a.state == State.FAILED


def test_handshake_and_ordering() -> None:
    a = Authenticator(SaslServerConfig(("PLAIN",), {"u": "p"}), lambda u, m: None)
    assert a.mechanisms == ("PLAIN",)
    r = a.step(b"\x00u\x00p")  # before the handshake
    assert r.error is not None and r.error.code == ErrorCode.illegal_sasl_state
    assert a.handshake("SCRAM-SHA-256") == ErrorCode.unsupported_sasl_mechanism
    assert a.handshake("plain") == ErrorCode.unsupported_sasl_mechanism  # names are exact
    assert a.handshake("PLAIN") == ErrorCode.none
    assert a.handshake("PLAIN") == ErrorCode.illegal_sasl_state
    assert a.step(b"\x00u\x00p").principal == "User:u"
    r = a.step(b"\x00u\x00p")  # no re-authentication
    assert r.error is not None and r.error.code == ErrorCode.illegal_sasl_state


# ---------------------------------------------------------------------------------- SCRAM

CREDS: dict[tuple[str, str], ScramCredential] = {}


def _lookup(user: str, mechanism: str) -> ScramCredential | None:
    return CREDS.get((user, mechanism))


@pytest.fixture(scope="module", autouse=True)
def _credentials() -> None:
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        CREDS[("alice", mech)] = credential_from_password(mech, "alice-secret", 4096)
    CREDS[("bob,=x", "SCRAM-SHA-256")] = credential_from_password("SCRAM-SHA-256", "pw", 8192)


def _scram(mech: str) -> Authenticator:
    a = Authenticator(SaslServerConfig(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")), _lookup)
    assert a.handshake(mech) == ErrorCode.none
    return a


def _exchange(mech: str, user: str, password: str) -> tuple[Authenticator, list[StepResult],
                                                             scramp.ScramClient]:
    a = _scram(mech)
    client = scramp.ScramClient([mech], user, password)
    first = a.step(client.get_client_first().encode())
    results = [first]
    if first.error is None:
        client.set_server_first(first.response.decode())  # type: ignore[union-attr]
        results.append(a.step(client.get_client_final().encode()))
    return a, results, client


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_full_exchange(mech: str) -> None:
    a, (first, final), client = _exchange(mech, "alice", "alice-secret")
    assert first.done is False and first.error is None and first.principal is None
    assert final.done and final.error is None and final.principal == "User:alice"
    client.set_server_final(final.response.decode())  # type: ignore[union-attr]  # verifies v=
    assert a.state == State.AUTHENTICATED


def test_scram_user_name_escapes() -> None:
    _, (_, final), _ = _exchange("SCRAM-SHA-256", "bob,=x", "pw")
    assert final.principal == "User:bob,=x"


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user_look_the_same(mech: str) -> None:
    wrong = _exchange(mech, "alice", "guess")[1]
    unknown = _exchange(mech, "nobody", "guess")[1]
    # bob has a SCRAM-SHA-256 credential only.
    other_mech = _exchange(mech, "bob,=x", "pw")[1] if mech.endswith("512") else wrong
    for first, final in (wrong, unknown, other_mech):  # all fail at the second step
        assert first.error is None and not first.done and first.response is not None
        assert final == StepResult(None, True, None, AuthError(
            ErrorCode.sasl_authentication_failed,
            f"Authentication failed: invalid credentials for SASL mechanism {mech}"))
    # The unknown user's server-first looks like a real one, with a stable salt.
    again = _exchange(mech, "nobody", "other")[1][0]
    assert _salt_of(again) == _salt_of(unknown[0])


def _salt_of(server_first: StepResult) -> str:
    assert server_first.response is not None
    return dict(p.split("=", 1) for p in server_first.response.decode().split(","))["s"]


def test_scram_tampered_and_malformed_messages_fail() -> None:
    a = _scram("SCRAM-SHA-256")
    r = a.step(b"not a scram message")
    assert r.error is not None and r.error.code == ErrorCode.sasl_authentication_failed
    a = _scram("SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    first = a.step(client.get_client_first().encode())
    client.set_server_first(first.response.decode())  # type: ignore[union-attr]
    final = client.get_client_final()
    tampered = final[:-4] + ("AAA=" if not final.endswith("AAA=") else "BBB=")
    r = a.step(tampered.encode())
    assert r.error is not None and r.error.code == ErrorCode.sasl_authentication_failed
    assert a.state == State.FAILED


def test_scram_delegation_tokens_are_refused() -> None:
    a = _scram("SCRAM-SHA-256")
    r = a.step(b"n,,n=alice,r=abcdefgh,tokenauth=true")
    assert r.error is not None and r.error.code == ErrorCode.sasl_authentication_failed


def test_failures_never_log_secrets(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.DEBUG, logger="shoal.security.sasl"):
        _exchange("SCRAM-SHA-256", "alice", "guess-password")
        a = _plain()
        a.step(b"\x00alice\x00plain-guess")
    text = caplog.text
    assert "guess-password" not in text and "plain-guess" not in text and "p=" not in text
    assert "alice" in text
