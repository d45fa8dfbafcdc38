"""A served listener: what ``broker/server.py`` opened for one entry of ``listeners``.

Concept: ``Endpoint`` joins a parsed ``Listener`` (``broker/security/listeners.py``) with what
serving it needs, built once when the server starts: the TLS server context and principal mapper
(SSL, SASL_SSL), the SASL settings (SASL_PLAINTEXT, SASL_SSL), and the address Metadata,
FindCoordinator and DescribeCluster advertise to clients that came in on it.

Invariants: ``ssl`` is set exactly when the protocol uses TLS, ``sasl`` exactly when it uses
SASL; the advertised address is routable (a wildcard bind advertises 127.0.0.1, as before).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.security.listeners import Listener, SecurityProtocol
from broker.security.sasl import SaslServerConfig
from broker.security.tls import PrincipalMapper, principal_mapper, server_context

_WILDCARDS = ("", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: Listener
    ssl: ssl.SSLContext | None = field(default=None, repr=False)
    mapper: PrincipalMapper | None = field(default=None, repr=False)
    sasl: SaslServerConfig | None = field(default=None, repr=False)
    # Filled in once the socket is bound (``bound``).
    advertised_host: str = ""
    advertised_port: int = 0

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def security_protocol(self) -> SecurityProtocol:
        return self.listener.security_protocol

    @property
    def advertised(self) -> tuple[str, int]:
        return self.advertised_host, self.advertised_port

    def bound(self, host: str, port: int) -> Endpoint:
        """This endpoint with its advertised address resolved against the bound socket:
        ``advertised.listeners`` wins, else the listener's host (a wildcard becomes
        127.0.0.1) and the bound port (the listener's port may be 0)."""
        adv_host = self.listener.advertised_host
        adv_port = self.listener.advertised_port
        if adv_host in _WILDCARDS:
            adv_host = host if host not in _WILDCARDS else "127.0.0.1"
        return Endpoint(self.listener, self.ssl, self.mapper, self.sasl, adv_host,
                        adv_port or port)


def build_endpoint(config: Mapping[str, Any], listener: Listener) -> Endpoint:
    """What serving ``listener`` needs (reads the key and trust store files).

    Raises:
        TlsConfigError: the listener's ``ssl.*`` settings cannot be used.
        SaslConfigError: its SASL settings cannot be used.
    """
    protocol = listener.security_protocol
    context = mapper = sasl = None
    if protocol.uses_tls:
        context = server_context(config, listener.name)
        mapper = principal_mapper(config, listener.name)
    if protocol.uses_sasl:
        sasl = SaslServerConfig.from_config(config, listener.name)
    return Endpoint(listener, context, mapper, sasl)
