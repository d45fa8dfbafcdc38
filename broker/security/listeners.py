"""Listeners: Kafka's ``listeners``, ``listener.security.protocol.map``, ``advertised.listeners``
and ``inter.broker.listener.name``, and per-listener config lookup.

A listener is ``NAME://host:port``. The name is upper-cased (Kafka's ``ListenerName.normalised``)
and mapped to a security protocol by ``listener.security.protocol.map``; its default maps each of
the four protocol names to itself, so ``SASL_SSL://...`` needs no map. ``[::1]`` is an IPv6 host
and an empty host means every interface. A bare ``host:port`` (Shoal's ``--listen``) is a
PLAINTEXT listener. ``advertised.listeners`` gives the address clients are told for a listener
of the same name; a listener without one advertises its own address.

Per-listener configs (``listener_config``) follow Kafka: ``listener.name.<lower-case name>.<key>``
wins over ``<key>``; a SASL JAAS config is looked up as
``listener.name.<name>.<mechanism lower-case>.sasl.jaas.config`` first, then the un-prefixed
``sasl.jaas.config`` (Kafka brokers read only the prefixed form or a JAAS file; issue 13 asks
for both).

Pure: parsing only, no sockets and no name resolution.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class ListenerError(ValueError):
    """A listener setting that cannot be used; the message names the config and the value."""


class SecurityProtocol(str, Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"

# Kafka's listener names: letters, digits, '_' and '-' (it upper-cases them).
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
# NAME://host:port, host may be [ipv6] or empty.
_ENDPOINT = re.compile(r"^(?:(?P<name>[^:/]*)://)?(?P<host>\[[^\]]*\]|[^\[\]/]*):(?P<port>[^:/]*)$")


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener. ``host`` is "" for every interface; ``port`` 0 asks the OS for a port.
    ``advertised_host``/``advertised_port`` are what Metadata tells clients on this listener
    ("" / 0: use the bound address, which only the server knows)."""

    name: str
    security_protocol: SecurityProtocol
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def bind_host(self) -> str | None:
        """The host to pass to ``asyncio.start_server`` (None: every interface)."""
        return self.host or None

    @property
    def config_prefix(self) -> str:
        """``listener.name.<lower-case name>.``"""
        return listener_prefix(self.name)


def listener_prefix(name: str) -> str:
    return f"listener.name.{name.lower()}."


def parse_endpoint(value: str, config: str = "listeners") -> tuple[str | None, str, int]:
    """``NAME://host:port`` (or ``host:port``) to (upper-case name or None, host, port).

    Raises:
        ListenerError: malformed entry, bad name or a port outside 0..65535.
    """
    s = value.strip()
    m = _ENDPOINT.match(s)
    if m is None:
        raise ListenerError(f"{config}: {value!r} is not NAME://host:port")
    name = m.group("name")
    if name is not None:
        if not _NAME.match(name):
            raise ListenerError(f"{config}: {value!r} has an invalid listener name {name!r}")
        name = name.upper()
    host = m.group("host")
    if host.startswith("["):
        host = host[1:-1]
    elif ":" in host:
        raise ListenerError(f"{config}: {value!r}: write an IPv6 host in brackets, [{host}]")
    try:
        port = int(m.group("port"))
    except ValueError:
        raise ListenerError(f"{config}: {value!r}: port {m.group('port')!r} is not a number") \
            from None
    if not 0 <= port <= 65535:
        raise ListenerError(f"{config}: {value!r}: port {port} is out of range")
    return name, host, port


def parse_protocol_map(value: str | None) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...`` to {upper-case name: protocol}; empty/None gives Kafka's default.

    Raises:
        ListenerError: an entry without ':', an unknown protocol or a name given twice.
    """
    raw = value.strip() if value else ""
    out: dict[str, SecurityProtocol] = {}
    for entry in (raw or DEFAULT_PROTOCOL_MAP).split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, proto = entry.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or not _NAME.match(name):
            raise ListenerError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL")
        try:
            protocol = SecurityProtocol(proto)
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ListenerError(f"listener.security.protocol.map: {entry!r}: unknown security "
                                f"protocol {proto!r} (one of {known})") from None
        if name in out:
            raise ListenerError(f"listener.security.protocol.map: listener {name} is mapped twice")
        out[name] = protocol
    return out


def parse_listeners(listeners: str, protocol_map: str | None = None,
                    advertised: str | None = None,
                    inter_broker_listener_name: str | None = None,
                    exclude: Collection[str] = ()) -> list[Listener]:
    """All listeners, in the order given, with their protocols and advertised addresses.

    ``exclude`` names listeners the broker does not serve (Kafka's ``controller.listener.names``:
    Shoal has no controller).

    Raises:
        ListenerError: any entry malformed, a name twice, a port twice, a listener with no
            protocol in the map, an advertised listener that is not a listener (or is 0.0.0.0),
            or an ``inter.broker.listener.name`` that is not a listener.
    """
    pmap = parse_protocol_map(protocol_map)
    excluded = {n.strip().upper() for n in exclude if n.strip()}
    parsed = _parse_bound(listeners)
    adv = _parse_advertised(advertised, [n for n, _, _ in parsed])
    out: list[Listener] = []
    for name, host, port in parsed:
        if name in excluded:
            continue
        protocol = pmap.get(name)
        if protocol is None:
            raise ListenerError(f"listeners: no security protocol for listener {name}; add "
                                f"{name}:<PROTOCOL> to listener.security.protocol.map")
        a_host, a_port = adv.get(name, (host, port))
        out.append(Listener(name, protocol, host, port, a_host, a_port))
    if not out:
        raise ListenerError("listeners: every listener is a controller listener; Shoal needs "
                            "one to serve clients")
    if inter_broker_listener_name:
        ibl = inter_broker_listener_name.strip().upper()
        if ibl not in {x.name for x in out}:
            raise ListenerError(f"inter.broker.listener.name: {ibl} is not one of the listeners "
                                f"({', '.join(x.name for x in out)})")
    return out


def _parse_bound(listeners: str) -> list[tuple[str, str, int]]:
    """Raises:
        ListenerError: none, malformed, or a name or port twice.
    """
    entries = [e for e in listeners.split(",") if e.strip()]
    if not entries:
        raise ListenerError("listeners: at least one listener is required")
    parsed: list[tuple[str, str, int]] = []
    for entry in entries:
        name, host, port = parse_endpoint(entry, "listeners")
        name = name or "PLAINTEXT"
        if any(n == name for n, _, _ in parsed):
            raise ListenerError(f"listeners: each listener must have a different name; {name} "
                                "appears twice")
        # Port 0 (any free port) may repeat; a port on all interfaces clashes with any host.
        if port and any(p == port and (h == host or not h or not host) for _, h, p in parsed):
            raise ListenerError(f"listeners: each listener must have a different port; {port} "
                                "appears twice")
        parsed.append((name, host, port))
    return parsed


def _parse_advertised(advertised: str | None, names: list[str]) -> dict[str, tuple[str, int]]:
    """Raises:
        ListenerError: malformed, a name twice or not a listener, or an unroutable host.
    """
    adv: dict[str, tuple[str, int]] = {}
    for entry in (advertised or "").split(","):
        if not entry.strip():
            continue
        name, host, port = parse_endpoint(entry, "advertised.listeners")
        name = name or "PLAINTEXT"
        if name in adv:
            raise ListenerError(f"advertised.listeners: {name} appears twice")
        if name not in names:
            raise ListenerError(f"advertised.listeners: {name} is not one of the listeners "
                                f"({', '.join(names)})")
        if host in ("0.0.0.0", "::"):
            raise ListenerError(f"advertised.listeners: {entry.strip()!r}: cannot advertise the "
                                f"unroutable address {host}")
        adv[name] = (host, port)
    return adv


def listener_config(config: Mapping[str, Any], listener_name: str, key: str,
                    default: Any = None) -> Any:
    """The value of ``key`` for a listener: ``listener.name.<name>.<key>``, else ``key``, else
    ``default``. A value of None counts as unset."""
    value = config.get(listener_prefix(listener_name) + key)
    if value is None:
        value = config.get(key)
    return default if value is None else value


def jaas_config(config: Mapping[str, Any], listener_name: str, mechanism: str) -> str | None:
    """The JAAS config text for a SASL mechanism on a listener: the listener's
    ``<mechanism lower-case>.sasl.jaas.config``, else ``sasl.jaas.config``, else None."""
    value = config.get(f"{listener_prefix(listener_name)}{mechanism.lower()}.sasl.jaas.config")
    if value is None:
        value = config.get("sasl.jaas.config")
    return value or None
