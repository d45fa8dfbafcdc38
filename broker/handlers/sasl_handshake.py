"""SaslHandshake (17) v0-1: the client picks a SASL mechanism (KIP-43; v1 KIP-152).

On a SASL listener the connection answers it while the client authenticates
(``broker/authentication.py``): v1 is followed by SaslAuthenticate requests, v0 by raw SASL tokens
without request headers. This handler serves every other case: a listener without SASL, or a
connection that has already authenticated. Kafka's ``KafkaApis`` answers ILLEGAL_SASL_STATE then
("Unexpected handshake request with client mechanism ..."), and so does Shoal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.context import RequestContext
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import SaslHandshakeRequest

API_KEY = 17
VERSIONS = (0, 1)


def response(version: int, error: ErrorCode, mechanisms: Sequence[str]) -> Any:
    """A SaslHandshake response listing the listener's ``mechanisms``."""
    m = response_module(API_KEY, version)
    return make(m.SaslHandshakeResponse, error_code=error, mechanisms=tuple(mechanisms))


def handle(ctx: RequestContext, req: SaslHandshakeRequest) -> Any:
    return response(ctx.api_version, ErrorCode.illegal_sasl_state, ())
