"""What a handler knows about the request it serves, besides the typed body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.app import Broker


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int


class NoResponse:
    """Returned by a handler when the protocol says not to answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()
