"""SASL server side, sans-IO: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677, via scramp).

One ``Authenticator`` per connection on a SASL listener. The shell feeds it what SaslHandshake
and SaslAuthenticate carry and sends back what it returns:

    handshake(mechanism)  -> ErrorCode   (UNSUPPORTED_SASL_MECHANISM: answer with ``mechanisms``)
    step(auth_bytes)      -> StepResult(response, done, principal, error)

States (transitions checked, as a table):

    NEED_HANDSHAKE --handshake ok--> NEED_AUTH --step--> (SCRAM: IN_PROGRESS --step-->)
        AUTHENTICATED | FAILED

A failure is ``error=AuthError(SASL_AUTHENTICATION_FAILED, message)``; Kafka then closes the
connection, and so should the shell. A step out of order gives ILLEGAL_SASL_STATE. Messages name
the mechanism, never a password or a SCRAM proof.

An unknown SCRAM user does not reveal itself (RFC 5802 section 5.1 allows a mock): the server
answers client-first with a salt derived from the user name and a per-process secret and fails
at client-final exactly as for a wrong password. Kafka itself fails earlier, at client-first.

Deviations from Kafka: a SCRAM authorization id must be empty (scramp refuses one; Kafka allows
it if equal to the user name; Java and librdkafka clients send none), delegation tokens
(``tokenauth``) and KIP-368 re-authentication are not served (SaslAuthenticate v1+ answers
session_lifetime_ms=0).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

import scramp
from kio.schema.errors import ErrorCode

from broker.security.jaas import PLAIN_LOGIN_MODULE, JaasError, parse_jaas_config
from broker.security.listeners import jaas_config, listener_config, listener_prefix
from broker.security.scram_store import DEFAULT_ITERATIONS, ScramCredential

log = logging.getLogger("shoal.security.sasl")

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

ScramLookup = Callable[[str, str], ScramCredential | None]

# Per process: the same unknown user gets the same mock salt for the broker's lifetime.
_MOCK_SECRET = secrets.token_bytes(32)


class SaslConfigError(ValueError):
    """The SASL settings of a listener cannot be used; the message names the config."""


@dataclass(frozen=True, slots=True)
class AuthError:
    code: ErrorCode
    message: str


class StepResult(NamedTuple):
    response: bytes | None
    done: bool
    principal: str | None
    error: AuthError | None


class State(Enum):
    NEED_HANDSHAKE = "need-handshake"
    NEED_AUTH = "need-auth"
    IN_PROGRESS = "in-progress"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


_TRANSITIONS: Mapping[State, frozenset[State]] = {
    State.NEED_HANDSHAKE: frozenset({State.NEED_AUTH}),
    State.NEED_AUTH: frozenset({State.IN_PROGRESS, State.AUTHENTICATED, State.FAILED}),
    State.IN_PROGRESS: frozenset({State.AUTHENTICATED, State.FAILED}),
    State.AUTHENTICATED: frozenset(),
    State.FAILED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    """The SASL settings of one listener: enabled mechanisms and the PLAIN users."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], listener_name: str) -> SaslServerConfig:
        """Read ``sasl.enabled.mechanisms`` and the JAAS configs of a listener (Kafka's names,
        with the ``listener.name.<listener>.`` prefix first).

        Raises:
            SaslConfigError: no mechanism, an unsupported one (GSSAPI, OAUTHBEARER), PLAIN
                without a PlainLoginModule JAAS config, or a JAAS config that does not parse.
        """
        key = "sasl.enabled.mechanisms"
        raw = listener_config(config, listener_name, key, "")
        mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in str(raw).split(",")
                                         if m.strip()))
        if not mechanisms:
            raise SaslConfigError(f"{key} is empty for SASL listener {listener_name}")
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise SaslConfigError(
                f"{key} for listener {listener_name}: {', '.join(unsupported)} not supported by "
                f"Shoal; use {', '.join(SUPPORTED_MECHANISMS)}")
        users: dict[str, str] = {}
        for mechanism in mechanisms:
            text = jaas_config(config, listener_name, mechanism)
            where = (f"{listener_prefix(listener_name)}{mechanism.lower()}.sasl.jaas.config "
                     "(or sasl.jaas.config)")
            if text is None:
                if mechanism == PLAIN:
                    raise SaslConfigError(
                        f"PLAIN on listener {listener_name} needs {where} with "
                        f'{PLAIN_LOGIN_MODULE} required user_<name>="<password>";')
                continue
            try:
                entry = parse_jaas_config(text, where)
            except JaasError as exc:
                raise SaslConfigError(str(exc)) from None
            if mechanism == PLAIN:
                if entry.login_module != PLAIN_LOGIN_MODULE:
                    raise SaslConfigError(f"{where}: PLAIN needs {PLAIN_LOGIN_MODULE}, not "
                                          f"{entry.login_module}")
                users = entry.plain_users()
        return cls(mechanisms, users)


def failed_message(mechanism: str) -> str:
    return f"Authentication failed: invalid credentials for SASL mechanism {mechanism}"


class Authenticator:
    """The SASL exchange of one connection (see the module doc)."""

    def __init__(self, config: SaslServerConfig, scram_lookup: ScramLookup,
                 mock_secret: bytes = _MOCK_SECRET) -> None:
        self._config = config
        self._lookup = scram_lookup
        self._mock_secret = mock_secret
        self.state = State.NEED_HANDSHAKE
        self.mechanism: str | None = None
        # The user name the client gave (for logging a failure; None before it is known).
        self.attempted_user: str | None = None
        self.principal: str | None = None
        self._scram: Any = None

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self._config.mechanisms

    def _move(self, new: State) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise AssertionError(f"illegal SASL transition {self.state} -> {new}")
        self.state = new

    def handshake(self, mechanism: str) -> ErrorCode:
        """Choose the mechanism (SaslHandshake). NONE, UNSUPPORTED_SASL_MECHANISM (the shell
        answers with ``mechanisms``) or ILLEGAL_SASL_STATE (a second handshake)."""
        if self.state != State.NEED_HANDSHAKE:
            return ErrorCode.illegal_sasl_state
        if mechanism not in self._config.mechanisms:
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self._move(State.NEED_AUTH)
        return ErrorCode.none

    def step(self, data: bytes) -> StepResult:
        """Consume one SaslAuthenticate ``auth_bytes``."""
        if self.state not in (State.NEED_AUTH, State.IN_PROGRESS):
            return StepResult(None, self.state == State.AUTHENTICATED, None, AuthError(
                ErrorCode.illegal_sasl_state,
                f"unexpected SASL authenticate request in state {self.state.value}"))
        assert self.mechanism is not None
        if self.mechanism == PLAIN:
            return self._plain(data)
        return self._scram_step(data)

    def _fail(self, reason: str) -> StepResult:
        # The reason is for the broker's debug log only; the client gets the generic text.
        log.debug("SASL %s authentication of %r failed: %s", self.mechanism,
                  self.attempted_user, reason)
        self._move(State.FAILED)
        assert self.mechanism is not None
        return StepResult(None, True, None, AuthError(ErrorCode.sasl_authentication_failed,
                                                      failed_message(self.mechanism)))

    def _succeed(self, user: str, response: bytes) -> StepResult:
        self.principal = f"User:{user}"
        self._move(State.AUTHENTICATED)
        return StepResult(response, True, self.principal, None)

    # -- PLAIN (RFC 4616: [authzid] NUL authcid NUL passwd, UTF-8) ---------------------------

    def _plain(self, data: bytes) -> StepResult:
        parts = data.split(b"\x00")
        if len(parts) != 3:
            return self._fail(f"expected 3 NUL-separated tokens, got {len(parts)}")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._fail("not UTF-8")
        self.attempted_user = user or None
        if not user:
            return self._fail("no user name")
        if not password:
            return self._fail("no password")
        if authzid and authzid != user:
            return self._fail("the authorization id differs from the user name")
        expected = self._config.plain_users.get(user)
        # Compare even for an unknown user, so the time taken does not tell who exists.
        ok = hmac.compare_digest((expected if expected is not None else "\x00" + password)
                                 .encode("utf-8"), password.encode("utf-8"))
        if expected is None or not ok:
            return self._fail("unknown user or wrong password")
        return self._succeed(user, b"")

    # -- SCRAM (client-first -> server-first -> client-final -> server-final) ----------------

    def _scram_step(self, data: bytes) -> StepResult:
        try:
            message = data.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail("not UTF-8")
        assert self.mechanism is not None
        try:
            if self.state == State.NEED_AUTH:
                self._scram = scramp.ScramMechanism(self.mechanism).make_server(self._auth_info)
                self._scram.set_client_first(message)
                if any(a.startswith("tokenauth=") for a in message.split(",")[2:]):
                    return self._fail("delegation tokens are not supported")
                first = self._scram.get_server_first()
                self._move(State.IN_PROGRESS)
                return StepResult(first.encode("utf-8"), False, None, None)
            self._scram.set_client_final(message)
            final = self._scram.get_server_final()
        except scramp.ScramException as exc:
            # str(exc) names the SCRAM error kind only (no proof, no key).
            return self._fail(f"SCRAM: {exc}")
        assert self.attempted_user is not None
        return self._succeed(self.attempted_user, final.encode("utf-8"))

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's credential callback; a mock for users without a credential."""
        assert self.mechanism is not None
        self.attempted_user = user
        cred = self._lookup(user, self.mechanism)
        if cred is None:
            cred = self._mock(user)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def _mock(self, user: str) -> ScramCredential:
        assert self.mechanism is not None
        # 64 bytes, the salt length librdkafka's AlterUserScramCredentials uses.
        salt = hmac.new(self._mock_secret, f"{self.mechanism}\x00{user}".encode(),
                        "sha512").digest()
        size = 32 if self.mechanism == SCRAM_SHA_256 else 64
        # Random keys: no client proof can match them.
        return ScramCredential(salt, secrets.token_bytes(size), secrets.token_bytes(size),
                               DEFAULT_ITERATIONS)
