"""Authentication on one client connection (issue 13): who the connection's principal is.

Each connection belongs to one listener (``broker/endpoint.py``):

- TLS (SSL, SASL_SSL): the server accepts the socket, counts it against the connection limits
  and runs the TLS handshake (``broker/server.py``); the connection starts once it has
  succeeded. Its principal is the client certificate's DN mapped by
  ``ssl.principal.mapping.rules`` (``User:ANONYMOUS`` without a certificate;
  ``certificate_principal``); a DN no rule maps closes the connection, as in Kafka.
- SASL (SASL_PLAINTEXT, SASL_SSL): ``broker/authentication.py`` decides what may come before the
  client has authenticated; until then frames are capped at ``sasl.server.max.receive.size`` and
  the whole exchange at ``connections.authentication.timeout.ms``. The SASL principal replaces
  the certificate's (as in Kafka). Failures are answered as Kafka answers them, counted
  (``shoal_sasl_authentication_failures_total``) and logged with the user name the client gave
  and its address, rate-limited; a password or SCRAM proof never reaches the log
  (``record_reply``).

``broker/connection.py`` writes the gate's answers in request order and applies the outcome.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.authentication import Reply, SaslGate
from broker.authz import Principal
from broker.connection_limits import RateLimitedLog
from broker.security.tls import PrincipalMapper, tls_principal

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.endpoint import Endpoint

log = logging.getLogger("shoal.connection")


def certificate_principal(transport: asyncio.BaseTransport,
                          mapper: PrincipalMapper) -> Principal:
    """The principal of a TLS connection: its client certificate's DN mapped by ``mapper``.

    Raises:
        NoMatchingRule: no rule maps the DN (the connection must be closed, as in Kafka).
    """
    sslobj = transport.get_extra_info("ssl_object")
    name = tls_principal(sslobj.getpeercert() if sslobj is not None else None, mapper)
    return Principal.parse(name)


def record_reply(broker: Broker, listener: Endpoint | None, gate: SaslGate, reply: Reply,
                 peer: str, sasl_log: RateLimitedLog) -> Principal | None:
    """Count and log what the SASL gate answered on the connection from ``peer``; the principal
    the client authenticated as, if this reply completed the exchange."""
    metrics = broker.metrics
    name = listener.name if listener is not None else "?"
    if reply.failure is not None:
        metrics.sasl_failures.inc((name, gate.mechanism))
        suppressed = sasl_log.admit(broker.clock.monotonic_ms())
        if suppressed is not None:
            more = f" ({suppressed} more since the last report)" if suppressed else ""
            user = gate.auth.attempted_user
            log.warning("SASL authentication of %s from %s on listener %s failed: %s; "
                        "closing this connection%s",
                        f"User:{user}" if user else "an unnamed user", peer, name,
                        reply.failure, more)
    if reply.principal is None:
        return None
    metrics.sasl_successes.inc((name, gate.mechanism))
    principal = Principal.parse(reply.principal)
    log.debug("connection from %s on listener %s authenticated as %s (%s)", peer, name,
              principal, gate.mechanism)
    return principal
