"""The SASL exchange of one connection, sans-IO (part of the client core).

After ApiVersions, SaslHandshake v1 and then SaslAuthenticate (v0-2) round trips, as a state
machine of requests out and responses in (``SaslExchange.next_request`` / ``receive``). PLAIN is
one message (RFC 4616); SCRAM-SHA-256/512 is RFC 5802 through ``scramp``'s client, which also
checks the server's final signature, so a broker that does not know the password cannot pass
itself off. Passwords never appear in messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol

import scramp
from kio.schema.errors import ErrorCode

from client.errors import KafkaError, error_class, error_for
from client.security import PLAIN, SecurityConfigError, SecuritySettings
from protocol.codec import request_module

__all__ = ["SASL_AUTHENTICATE", "SASL_HANDSHAKE", "SaslExchange"]

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATE_VERSIONS = (0, 2)


class Stage(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    DONE = "done"




def _auth_failed(message: str) -> KafkaError:
    return error_class(ErrorCode.sasl_authentication_failed)(message)


class _Mechanism(Protocol):
    """One SASL mechanism's client messages: ``first()``, then ``step(challenge)`` until
    ``complete``."""

    complete: bool

    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None: ...


class _Plain:
    complete = False

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\x00" + username.encode() + b"\x00" + password.encode()

    def first(self) -> bytes:
        self.complete = True
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        return None


class _Scram:
    complete = False

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._client = scramp.ScramClient([mechanism], username, password)
        self._sent_final = False

    def first(self) -> bytes:
        return str(self._client.get_client_first()).encode()

    def step(self, challenge: bytes) -> bytes | None:
        try:
            if not self._sent_final:
                self._client.set_server_first(challenge.decode())
                self._sent_final = True
                return str(self._client.get_client_final()).encode()
            self._client.set_server_final(challenge.decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            # scramp's message names the SCRAM failure only (no key, no proof).
            raise _auth_failed(f"the broker's SCRAM answer did not verify: {exc}") from None
        self.complete = True
        return None


class SaslExchange:
    """The SASL exchange of one connection, sans-IO.

    The shell, after ApiVersions (whose ranges it passes in), loops::

        while (req := exchange.next_request()) is not None:
            exchange.receive(call(*req))

    ``next_request`` gives ``(api_key, version, body)``; ``receive`` takes the decoded
    response body and raises a ``KafkaError`` (``SaslAuthenticationFailedError``,
    ``UnsupportedSaslMechanismError``, ...) when the broker refuses. ``done`` is true after
    the last message was verified.
    """

    def __init__(self, settings: SecuritySettings,
                 api_ranges: Mapping[int, tuple[int, int]]) -> None:
        if not settings.uses_sasl:
            raise SecurityConfigError(f"security.protocol={settings.protocol} uses no SASL")
        settings.validate()
        assert settings.sasl_mechanism and settings.sasl_username is not None
        assert settings.sasl_password is not None
        self.mechanism = settings.sasl_mechanism
        self._version = _pick(api_ranges, SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSIONS)
        _pick(api_ranges, SASL_HANDSHAKE, (1, 1))
        self._mech: _Mechanism = (
            _Plain(settings.sasl_username, settings.sasl_password) if self.mechanism == PLAIN
            else _Scram(self.mechanism, settings.sasl_username, settings.sasl_password))
        self._stage = Stage.HANDSHAKE
        self._outgoing: bytes | None = None
        self._waiting = False

    @property
    def done(self) -> bool:
        return self._stage is Stage.DONE

    def next_request(self) -> tuple[int, int, Any] | None:
        """The next request to send, or None when the exchange is over (or a response is
        still awaited)."""
        if self._waiting or self._stage is Stage.DONE:
            return None
        self._waiting = True
        if self._stage is Stage.HANDSHAKE:
            m = request_module(SASL_HANDSHAKE, 1)
            return SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism=self.mechanism)
        assert self._outgoing is not None
        m = request_module(SASL_AUTHENTICATE, self._version)
        return (SASL_AUTHENTICATE, self._version,
                m.SaslAuthenticateRequest(auth_bytes=self._outgoing))

    def receive(self, response: Any) -> None:
        """Take the response to the last request.

        Raises:
            KafkaError: the broker refused the mechanism or the credentials, or its SCRAM
                signature did not verify.
        """
        if not self._waiting:
            raise RuntimeError("no SASL request is outstanding")
        self._waiting = False
        if self._stage is Stage.HANDSHAKE:
            if response.error_code == ErrorCode.unsupported_sasl_mechanism:
                offered = ", ".join(response.mechanisms) or "none"
                raise error_class(ErrorCode.unsupported_sasl_mechanism)(
                    f"the broker does not enable SASL mechanism {self.mechanism} on this "
                    f"listener (it offers: {offered})")
            _raise_for(response.error_code, None)
            self._stage = Stage.AUTHENTICATE
            self._outgoing = self._mech.first()
            return
        _raise_for(response.error_code, getattr(response, "error_message", None))
        reply = self._mech.step(bytes(response.auth_bytes)) \
            if (response.auth_bytes or not self._mech.complete) else None
        if self._mech.complete:
            self._stage = Stage.DONE
            self._outgoing = None
        elif reply is None:
            raise _auth_failed(f"the SASL {self.mechanism} exchange ended early")
        else:
            self._outgoing = reply


def _raise_for(code: Any, message: str | None) -> None:
    err = error_for(code, message)
    if err is not None:
        raise err


def _pick(ranges: Mapping[int, tuple[int, int]], api_key: int, ours: tuple[int, int]) -> int:
    theirs = ranges.get(api_key)
    if theirs is None or theirs[1] < ours[0] or theirs[0] > ours[1]:
        raise error_class(ErrorCode.unsupported_version)(
            f"the broker does not serve API {api_key} in versions {ours[0]}-{ours[1]}; "
            "does its listener have SASL enabled?")
    return min(ours[1], theirs[1])
