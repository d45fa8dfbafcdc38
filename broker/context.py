"""What a handler knows about the request it serves, besides the typed body.

Authorization goes through here (``broker/authz.py`` has the rules and the API table): a
handler asks ``ctx.authorized(operation, resource)``, or ``ctx.denied(operation, type, names)``
for the names of a request it must refuse, each name asked once. With authorization off the
broker's authorizer is not ``enforcing`` and every operation but CLUSTER_ACTION is allowed
without calling it (the share-consume fast path). A refusal is counted in
``shoal_authorization_denied_total`` and logged, rate-limited (``DenialLog``), unless the
handler passes ``audit=False`` (probes that only shape an answer: hiding topics from an
all-topics Metadata, filtering ListGroups, Kafka's ``logIfDenied = false``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.authz import ANONYMOUS, CLUSTER, Operation, Principal, Resource, ResourceType

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.endpoint import Endpoint

log = logging.getLogger("shoal.authorizer")

_CLUSTER_ACTION = Operation.CLUSTER_ACTION
_NONE_DENIED: frozenset[str] = frozenset()


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

    def authorized(self, operation: Operation, resource: Resource, *, audit: bool = True) -> bool:
        """Whether the broker's authorizer lets this request's principal do ``operation``.
        A refusal is counted and logged unless ``audit`` is False."""
        authorizer = self.broker.authorizer
        if not authorizer.enforcing and operation is not _CLUSTER_ACTION:
            return True
        if authorizer.authorize(self.principal, operation, resource, self.client_host):
            return True
        if audit:
            self._refused(operation, resource)
        return False

    def authorized_cluster_admin(self, operation: Operation) -> bool:
        """Whether the principal may do ``operation`` on the CLUSTER for an admin RPC that hands
        out identities (the SCRAM credential RPCs). With an ACL authorizer this is Kafka's rule,
        ``operation`` on the CLUSTER; without one only ``super.users`` may (as CLUSTER_ACTION),
        where Kafka would let anyone. A refusal is counted and logged as ``operation``."""
        authorizer = self.broker.authorizer
        if authorizer.enforcing:
            return self.authorized(operation, CLUSTER)
        if authorizer.authorize(self.principal, _CLUSTER_ACTION, CLUSTER, self.client_host):
            return True
        self._refused(operation, CLUSTER)
        return False

    def denied(self, operation: Operation, resource_type: ResourceType, names: Iterable[str],
               *, audit: bool = True) -> frozenset[str]:
        """The distinct ``names`` (of resources of ``resource_type``) the principal may not do
        ``operation`` on; each name is asked once. Empty at once when authorization is off."""
        if not self.broker.authorizer.enforcing and operation is not _CLUSTER_ACTION:
            return _NONE_DENIED
        out = {n for n in set(names)
               if not self.authorized(operation, Resource(resource_type, n), audit=audit)}
        return frozenset(out) if out else _NONE_DENIED

    def authorized_operations(self, resource: Resource) -> int:
        """The AuthorizedOperations bitfield for ``resource`` (never audited: a probe)."""
        return int(self.broker.authorizer.authorized_operations(self.principal, resource,
                                                                self.client_host))

    def authorize_by_resource_type(self, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of ``resource_type``."""
        return bool(self.broker.authorizer.authorize_by_resource_type(
            self.principal, operation, resource_type, self.client_host))

    def refused(self, operation: Operation, resource: Resource) -> None:
        """Count and log a refusal decided without ``authorized`` (e.g. by resource type)."""
        self._refused(operation, resource)

    def _refused(self, operation: Operation, resource: Resource) -> None:
        broker = self.broker
        broker.metrics.authorization_denied.inc((operation.name, resource.type.name))
        principal = str(self.principal)
        suppressed = broker.denials.record((principal, operation, resource),
                                           broker.clock.monotonic_ms())
        if suppressed is None:
            return
        more = (f" ({suppressed} more refusal(s) of the same not logged since the last line)"
                if suppressed else "")
        log.info("denied: principal %s from %s may not %s %s %r (api %d)%s", principal,
                 self.client_host, operation.name, resource.type.name, resource.name,
                 self.api_key, more,
                 extra={"event": "authorization_denied", "principal": principal,
                        "operation": operation.name, "resource_type": resource.type.name,
                        "resource": resource.name, "host": self.client_host})


class NoResponse:
    """Returned by a handler when the protocol says not to answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()
