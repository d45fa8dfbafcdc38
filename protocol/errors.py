"""Wire faults: what can go wrong below the level of a typed request.

These are the only exceptions the protocol layer raises. Each carries the Kafka error code a broker
would report and says whether the fault is *local* (we cannot encode/serve something) or *remote*
(the peer sent bytes that violate the protocol). A remote fault ends that one connection; it never
affects other clients. Expected outcomes of well-formed requests are not exceptions: handlers
return them as error codes in the response (STYLE.md 1.7).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class ProtocolError(Exception):
    """Base of every wire fault."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str, *, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class RemoteProtocolError(ProtocolError):
    """The peer violated the protocol; the connection is closed after logging."""

    error_code = ErrorCode.invalid_request


class FrameTooLargeError(RemoteProtocolError):
    """A size prefix above ``socket.request.max.bytes`` (or negative)."""


class UnsupportedApiError(RemoteProtocolError):
    """An API key or version this broker does not serve (Kafka closes such connections)."""

    error_code = ErrorCode.unsupported_version


class MalformedRequestError(RemoteProtocolError):
    """A frame whose header or body does not decode as the schema says."""


class LocalProtocolError(ProtocolError):
    """We failed to encode a response: a bug, never the client's fault."""
