"""What a handler knows about the request it serves, besides the typed body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.authz import ANONYMOUS, Operation, Principal, Resource

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.endpoint import Endpoint


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int
    # Who sent the request (broker/authz.py): the SASL principal on SASL listeners, the client
    # certificate's on TLS listeners (ANONYMOUS without one), else ANONYMOUS.
    principal: Principal = ANONYMOUS
    # The listener the request came in on (None in unit tests that build contexts by hand).
    listener: Endpoint | None = None

    @property
    def advertised(self) -> tuple[str, int]:
        """The broker address to tell this client: its listener's advertised address."""
        if self.listener is not None:
            return self.listener.advertised
        return self.broker.advertised

    def authorized(self, operation: Operation, resource: Resource) -> bool:
        """Whether the broker's authorizer lets this request's principal do ``operation``."""
        return bool(self.broker.authorizer.authorize(self.principal, operation, resource,
                                                     self.client_host))


class NoResponse:
    """Returned by a handler when the protocol says not to answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()
