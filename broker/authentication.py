"""The SASL gate of one connection on a SASL listener: which requests may come before the client
has authenticated, and what to answer them (Kafka's ``SaslServerAuthenticator``).

Sans-IO: the connection hands it decoded requests (or, after a SaslHandshake v0, raw tokens) and
writes what it returns; the SASL mechanisms themselves are ``broker/security/sasl.py``.

Phases (transitions checked, as a table):

    HANDSHAKE --SaslHandshake v1 ok--> AUTHENTICATE --SaslAuthenticate...--> DONE
    HANDSHAKE --SaslHandshake v0 ok--> RAW_TOKENS   --raw token...-------> DONE
    any of the three --refused request, bad mechanism, failed credentials--> FAILED

- HANDSHAKE: ApiVersions (any number) and SaslHandshake are served; anything else closes the
  connection unanswered (Kafka: IllegalSaslStateException "Unexpected Kafka request of type ...
  during SASL handshake", then disconnect).
- An unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the
  connection closes (Kafka throws UnsupportedSaslMechanismException after sending it).
- AUTHENTICATE: only SaslAuthenticate; a failure is answered SASL_AUTHENTICATION_FAILED with a
  message, then the connection closes; any other request closes it unanswered.
- RAW_TOKENS (SaslHandshake v0, pre-KIP-152 clients): each frame is a bare SASL token and each
  answer a bare size-prefixed token; a failure closes the connection without an answer, as Kafka
  does for these clients (they get no error message).
- DONE: the gate is out of the way; the connection serves requests as the principal.

Frames before authentication are capped at ``sasl.server.max.receive.size`` (Kafka's name and
default, 512 KiB) by the connection, and a client that does not finish within
``connections.authentication.timeout.ms`` is closed by the connection sweep
(``broker/connection_limits.py``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import api_versions, sasl_authenticate, sasl_handshake
from broker.security.sasl import Authenticator

SASL_HANDSHAKE = sasl_handshake.API_KEY
SASL_AUTHENTICATE = sasl_authenticate.API_KEY
_I32 = struct.Struct(">i")


class Phase(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw-tokens"
    DONE = "done"
    FAILED = "failed"


_MOVES: Mapping[Phase, frozenset[Phase]] = {
    Phase.HANDSHAKE: frozenset({Phase.AUTHENTICATE, Phase.RAW_TOKENS, Phase.FAILED}),
    Phase.AUTHENTICATE: frozenset({Phase.DONE, Phase.FAILED}),
    Phase.RAW_TOKENS: frozenset({Phase.DONE, Phase.FAILED}),
    Phase.DONE: frozenset(),
    Phase.FAILED: frozenset(),
}


class Admit(enum.Enum):
    SERVE = "serve"          # an ordinary request the dispatcher answers (ApiVersions)
    INTERCEPT = "intercept"  # SaslHandshake/SaslAuthenticate: the gate answers it
    REFUSE = "refuse"        # not allowed now: close the connection unanswered


@dataclass(frozen=True, slots=True)
class Reply:
    """What to send for one request or token, and what follows.

    ``body``: a typed response to encode (None: nothing to encode); ``raw``: a complete frame to
    write as is (RAW_TOKENS); ``close``: close once it is written; ``principal``: set when the
    client has just authenticated; ``failure``: why it failed (for the broker's log and metrics;
    never holds a password)."""

    body: Any = None
    raw: bytes | None = None
    close: bool = False
    principal: str | None = None
    failure: str | None = None


class SaslGate:
    """The SASL phases of one connection (see the module doc)."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.auth = authenticator
        self.phase = Phase.HANDSHAKE

    def _move(self, new: Phase) -> None:
        if new not in _MOVES[self.phase]:
            raise AssertionError(f"illegal SASL gate transition {self.phase} -> {new}")
        self.phase = new

    @property
    def raw_tokens(self) -> bool:
        """Frames are bare SASL tokens (after a SaslHandshake v0), not requests."""
        return self.phase is Phase.RAW_TOKENS

    @property
    def mechanism(self) -> str:
        return self.auth.mechanism or "none"

    def admit(self, api_key: int) -> Admit:
        """Whether a request may come now (the connection closes the connection on REFUSE)."""
        if self.phase is Phase.HANDSHAKE:
            if api_key == api_versions.API_KEY:
                return Admit.SERVE
            if api_key == SASL_HANDSHAKE:
                return Admit.INTERCEPT
        elif self.phase is Phase.AUTHENTICATE and api_key == SASL_AUTHENTICATE:
            return Admit.INTERCEPT
        return Admit.REFUSE

    def refused(self, api_key: int) -> str:
        """Why a request was refused (for the log), and the gate fails."""
        where = "SASL handshake" if self.phase is Phase.HANDSHAKE else "SASL authentication"
        if self.phase not in (Phase.DONE, Phase.FAILED):
            self._move(Phase.FAILED)
        return f"unexpected request (api key {api_key}) during {where}"

    def handshake(self, version: int, mechanism: str) -> Reply:
        """A SaslHandshake request (admitted as INTERCEPT)."""
        error = self.auth.handshake(mechanism)
        body = sasl_handshake.response(version, error, self.auth.mechanisms)
        if error != ErrorCode.none:
            self._move(Phase.FAILED)
            return Reply(body, close=True, failure=(
                f"SASL mechanism {mechanism!r} is not enabled (enabled: "
                f"{', '.join(self.auth.mechanisms)})"
                if error == ErrorCode.unsupported_sasl_mechanism else "a second SaslHandshake"))
        self._move(Phase.RAW_TOKENS if version == 0 else Phase.AUTHENTICATE)
        return Reply(body)

    def authenticate(self, version: int, auth_bytes: bytes) -> Reply:
        """A SaslAuthenticate request (admitted as INTERCEPT)."""
        result = self.auth.step(auth_bytes)
        if result.error is not None:
            self._move(Phase.FAILED)
            return Reply(sasl_authenticate.response(version, result.error.code,
                                                    result.error.message, b""),
                         close=True, failure=result.error.message)
        body = sasl_authenticate.response(version, ErrorCode.none, None, result.response or b"")
        if result.done:
            self._move(Phase.DONE)
            return Reply(body, principal=result.principal)
        return Reply(body)

    def raw_token(self, token: bytes) -> Reply:
        """A bare SASL token (RAW_TOKENS): answered with a bare size-prefixed token."""
        result = self.auth.step(token)
        if result.error is not None:
            self._move(Phase.FAILED)
            return Reply(close=True, failure=result.error.message)
        data = result.response or b""
        frame = _I32.pack(len(data)) + data
        if result.done:
            self._move(Phase.DONE)
            return Reply(raw=frame, principal=result.principal)
        return Reply(raw=frame)
