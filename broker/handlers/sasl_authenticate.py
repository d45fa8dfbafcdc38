"""SaslAuthenticate (36) v0-2: one SASL token each way, with an error code (KIP-152).

On a SASL listener the connection answers it while the client authenticates
(``broker/authentication.py``). This handler serves every other case (no SASL on the listener,
or already authenticated; KIP-368 re-authentication is not served) with ILLEGAL_SASL_STATE, as
Kafka's ``KafkaApis`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import SaslAuthenticateRequest

API_KEY = 36
VERSIONS = (0, 2)


def response(version: int, error: ErrorCode, message: str | None, auth_bytes: bytes) -> Any:
    """A SaslAuthenticate response; v1+ keeps kio's session_lifetime_ms default, 0 (no
    re-authentication)."""
    m = response_module(API_KEY, version)
    return make(m.SaslAuthenticateResponse, error_code=error, error_message=message,
                auth_bytes=auth_bytes)


def handle(ctx: RequestContext, req: SaslAuthenticateRequest) -> Any:
    return response(ctx.api_version, ErrorCode.illegal_sasl_state,
                    "SaslAuthenticate request received after successful authentication"
                    if ctx.listener is not None and ctx.listener.sasl is not None else
                    f"listener {ctx.listener.name if ctx.listener else ''} does not use SASL",
                    b"")
