"""The SASL gate of a connection without an event loop (``broker/authentication.py``), the
served-listener address rules (``broker/endpoint.py``), and the rate-limited security log."""

from __future__ import annotations

import pytest
import scramp
from kio.schema.errors import ErrorCode

from broker.authentication import Admit, Phase, SaslGate
from broker.connection_limits import RateLimitedLog
from broker.endpoint import Endpoint
from broker.security.listeners import parse_listeners
from broker.security.sasl import Authenticator, SaslServerConfig
from broker.security.scram_store import ScramCredential, credential_from_password

CONFIG = SaslServerConfig(("PLAIN", "SCRAM-SHA-256"), {"admin": "admin-secret"})
API_VERSIONS, METADATA, HANDSHAKE, AUTHENTICATE = 18, 3, 17, 36


def _gate() -> SaslGate:
    alice = credential_from_password("SCRAM-SHA-256", "alice-secret", 4096)

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return alice if (user, mechanism) == ("alice", "SCRAM-SHA-256") else None

    return SaslGate(Authenticator(CONFIG, lookup))


@pytest.mark.parametrize(("phase", "api_key", "admit"), [
    (Phase.HANDSHAKE, API_VERSIONS, Admit.SERVE),
    (Phase.HANDSHAKE, HANDSHAKE, Admit.INTERCEPT),
    (Phase.HANDSHAKE, AUTHENTICATE, Admit.REFUSE),
    (Phase.HANDSHAKE, METADATA, Admit.REFUSE),
    (Phase.AUTHENTICATE, AUTHENTICATE, Admit.INTERCEPT),
    (Phase.AUTHENTICATE, API_VERSIONS, Admit.REFUSE),
    (Phase.AUTHENTICATE, HANDSHAKE, Admit.REFUSE),
    (Phase.AUTHENTICATE, METADATA, Admit.REFUSE),
], ids=lambda v: getattr(v, "name", str(v)))
def test_what_may_come_before_authentication(phase: Phase, api_key: int, admit: Admit) -> None:
    gate = _gate()
    gate.phase = phase
    assert gate.admit(api_key) is admit


def test_plain_over_saslauthenticate() -> None:
    gate = _gate()
    hs = gate.handshake(1, "PLAIN")
    assert (hs.body.error_code, hs.body.mechanisms, hs.close) == (
        ErrorCode.none, ("PLAIN", "SCRAM-SHA-256"), False)
    assert gate.phase is Phase.AUTHENTICATE
    done = gate.authenticate(2, b"\x00admin\x00admin-secret")
    assert (done.body.error_code, done.principal, done.close) == (ErrorCode.none,
                                                                  "User:admin", False)
    assert gate.phase is Phase.DONE


def test_a_wrong_password_is_answered_then_closed() -> None:
    gate = _gate()
    gate.handshake(1, "PLAIN")
    reply = gate.authenticate(1, b"\x00admin\x00nope")
    assert reply.body.error_code == ErrorCode.sasl_authentication_failed
    assert reply.body.error_message and "nope" not in reply.body.error_message
    assert reply.close and reply.principal is None and reply.failure
    assert "nope" not in reply.failure
    assert gate.phase is Phase.FAILED and gate.auth.attempted_user == "admin"


def test_an_unknown_mechanism_lists_the_enabled_ones_then_closes() -> None:
    gate = _gate()
    reply = gate.handshake(1, "GSSAPI")
    assert reply.body.error_code == ErrorCode.unsupported_sasl_mechanism
    assert reply.body.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert reply.close and gate.phase is Phase.FAILED


def test_scram_over_raw_tokens_after_handshake_v0() -> None:
    gate = _gate()
    assert gate.handshake(0, "SCRAM-SHA-256").body.error_code == ErrorCode.none
    assert gate.raw_tokens
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    first = gate.raw_token(client.get_client_first().encode())
    assert first.raw is not None and first.principal is None
    size, body = int.from_bytes(first.raw[:4], "big"), first.raw[4:]
    assert size == len(body)
    client.set_server_first(body.decode())
    final = gate.raw_token(client.get_client_final().encode())
    assert final.principal == "User:alice" and final.raw is not None
    client.set_server_final(final.raw[4:].decode())
    assert gate.phase is Phase.DONE


def test_a_raw_token_failure_closes_without_an_answer() -> None:
    gate = _gate()
    gate.handshake(0, "PLAIN")
    reply = gate.raw_token(b"\x00admin\x00nope")
    assert reply.close and reply.raw is None and reply.body is None
    assert gate.phase is Phase.FAILED


def test_a_refused_request_fails_the_gate() -> None:
    gate = _gate()
    assert "during SASL handshake" in gate.refused(METADATA)
    assert gate.phase is Phase.FAILED


@pytest.mark.parametrize(("listeners", "advertised", "bound", "expected"), [
    ("SSL://127.0.0.1:0", None, ("127.0.0.1", 40001), ("127.0.0.1", 40001)),
    ("SSL://:9094", None, ("0.0.0.0", 9094), ("127.0.0.1", 9094)),
    ("SSL://0.0.0.0:0", None, ("0.0.0.0", 40002), ("127.0.0.1", 40002)),
    ("SSL://0.0.0.0:9094", "SSL://broker.example:19094", ("0.0.0.0", 9094),
     ("broker.example", 19094)),
    ("SSL://127.0.0.1:0", "SSL://broker.example:0", ("127.0.0.1", 40003),
     ("broker.example", 40003)),
], ids=["bound-port", "wildcard", "wildcard-port-0", "advertised", "advertised-port-0"])
def test_the_advertised_address_of_a_listener(listeners: str, advertised: str | None,
                                              bound: tuple[str, int],
                                              expected: tuple[str, int]) -> None:
    (listener,) = parse_listeners(listeners, advertised=advertised)
    assert Endpoint(listener).bound(*bound).advertised == expected


def test_the_security_log_is_rate_limited() -> None:
    log = RateLimitedLog(1000)
    assert log.admit(0) == 0
    assert log.admit(10) is None and log.admit(999) is None
    assert log.admit(1000) == 2
    assert log.admit(1500) is None
    assert log.admit(5000) == 1
