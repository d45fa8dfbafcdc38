"""Client security: Kafka client properties to settings, a TLS context, and the SASL exchange.

One module for every Shoal client: the blocking admin client of the ``shoal`` CLI
(``client/admin_wire.py``), the asyncio ``ShareConsumer`` (``client/connection.py``) and, through
it, the Spark source. The shells move bytes; everything they share lives here and does no network
I/O:

- ``SecuritySettings.from_properties``: Kafka's client property names (``security.protocol``,
  ``sasl.mechanism``, ``sasl.username``/``sasl.password`` as librdkafka names them or
  ``sasl.jaas.config`` as Java clients do, ``ssl.ca.location``, ``ssl.certificate.location``,
  ``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``, and the
  Java PEM names ``ssl.truststore.location`` / ``ssl.keystore.location``) into one frozen
  dataclass. Properties that are not about security are ignored; an ``ssl.``/``sasl.`` property
  this client cannot honour is an error, so a misconfigured client fails instead of silently
  connecting with weaker settings.
- ``ssl_context``: an ``ssl.SSLContext`` from the settings (the files are read here). Like
  librdkafka, the server certificate is verified and its host name checked unless
  ``ssl.endpoint.identification.algorithm=none`` (or ``enable.ssl.certificate.verification``
  is false).
- ``SaslExchange``: after ApiVersions, SaslHandshake v1 and then SaslAuthenticate (v0-2) round
  trips, as a state machine of requests out and responses in (``next_request`` / ``receive``).
  PLAIN is one message (RFC 4616); SCRAM-SHA-256/512 is RFC 5802 through ``scramp``'s client,
  which also checks the server's final signature, so a broker that does not know the password
  cannot pass itself off.

Passwords never appear in ``repr``, messages or logs.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import scramp
from kio.schema.errors import ErrorCode

from client.errors import KafkaError, error_class, error_for
from protocol.codec import request_module

__all__ = [
    "MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SaslExchange",
    "SecurityConfigError",
    "SecuritySettings",
    "is_security_property",
    "librdkafka_config",
    "parse_jaas_options",
    "parse_properties",
    "ssl_context",
]

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATE_VERSIONS = (0, 2)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
PLAIN, SCRAM_SHA_256, SCRAM_SHA_512 = "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

# Properties read here. Java and librdkafka spellings of the same thing share one field.
_KNOWN = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.jaas.config", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
    "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification", "ssl.truststore.location", "ssl.truststore.type",
    "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password",
})
# ``ssl.``/``sasl.`` properties accepted and ignored: they tune what Python's ssl module or
# this client already does (protocol versions, re-login), so honouring them changes nothing.
_IGNORED = frozenset({
    "ssl.protocol", "ssl.enabled.protocols", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "sasl.kerberos.service.name",
})


def is_security_property(key: str) -> bool:
    """Whether a Kafka client property is about TLS or SASL (what this module reads)."""
    return key in _KNOWN or key in _IGNORED or key.startswith(("ssl.", "sasl."))


class SecurityConfigError(ValueError):
    """A security property is missing, unknown or invalid; the message names it."""


class Stage(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    """How a client secures its connections (PLAINTEXT by default)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_ca_pem: str | None = None  # CA certificates inline (PEM text)
    ssl_certificate_location: str | None = None  # client certificate chain (PEM)
    ssl_key_location: str | None = None  # its private key (PEM); None: in the certificate file
    ssl_key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https
    verify_certificate: bool = True  # enable.ssl.certificate.verification

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> SecuritySettings:
        """Settings from Kafka client properties (other properties are ignored).

        Raises:
            SecurityConfigError: an unknown ``ssl.``/``sasl.`` property, a bad value, or SASL
                without a mechanism, user name or password.
        """
        p = {str(k).strip(): str(v).strip() for k, v in props.items() if v is not None}
        for key in p:
            if (key.startswith(("ssl.", "sasl.")) and key not in _KNOWN
                    and key not in _IGNORED):
                raise SecurityConfigError(
                    f"client property {key!r} is not supported by this client; supported: "
                    f"{', '.join(sorted(k for k in _KNOWN if k.startswith(('ssl.', 'sasl.'))))}")
        protocol = p.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(f"security.protocol must be one of "
                                      f"{', '.join(SECURITY_PROTOCOLS)}, not {protocol!r}")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            if p.get(key, "PEM").upper() != "PEM":
                raise SecurityConfigError(f"{key}={p[key]} is not supported; this client reads "
                                          "PEM files only (set it to PEM)")
        mechanism = p.get("sasl.mechanism") or p.get("sasl.mechanisms")
        username, password = p.get("sasl.username"), p.get("sasl.password")
        jaas = p.get("sasl.jaas.config")
        if jaas:
            opts = parse_jaas_options(jaas)
            username = username or opts.get("username")
            password = password or opts.get("password")
        settings = cls(
            protocol=protocol,
            sasl_mechanism=mechanism.upper() if mechanism else None,
            sasl_username=username, sasl_password=password,
            ssl_ca_location=p.get("ssl.ca.location") or p.get("ssl.truststore.location"),
            ssl_ca_pem=p.get("ssl.ca.pem") or p.get("ssl.truststore.certificates"),
            ssl_certificate_location=(p.get("ssl.certificate.location")
                                      or p.get("ssl.keystore.location")),
            ssl_key_location=p.get("ssl.key.location"),
            ssl_key_password=p.get("ssl.key.password") or p.get("ssl.keystore.password"),
            check_hostname=_endpoint_check(p.get("ssl.endpoint.identification.algorithm")),
            verify_certificate=_bool(p, "enable.ssl.certificate.verification", True),
        )
        settings.validate()
        return settings

    @classmethod
    def from_options(cls, config: Mapping[str, Any] | None = None,
                     **kwargs: Any) -> SecuritySettings:
        """Settings from a dict of Kafka security properties plus keyword arguments named
        after them with ``_`` for ``.`` (``security_protocol="SASL_SSL"``,
        ``sasl_username=...``); a keyword wins over the dict, None means not given.

        Raises:
            SecurityConfigError: a property that is not about security, or see
                ``from_properties``.
        """
        props = dict(config or {})
        for key in props:
            if not is_security_property(key):
                raise SecurityConfigError(f"{key!r} is not a security property (security."
                                          "protocol, sasl.*, ssl.*)")
        for name, value in kwargs.items():
            key = name.replace("_", ".")
            if not is_security_property(key):
                raise SecurityConfigError(f"unknown security setting {name!r}")
            if value is not None:
                props[key] = value
        return cls.from_properties(props)

    def validate(self) -> None:
        """Check the settings hang together.

        Raises:
            SecurityConfigError: SASL without a supported mechanism, user name or password;
                a key without a certificate.
        """
        if self.protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(f"security.protocol must be one of "
                                      f"{', '.join(SECURITY_PROTOCOLS)}, not {self.protocol!r}")
        if self.uses_sasl:
            if self.sasl_mechanism is None:
                raise SecurityConfigError(f"security.protocol={self.protocol} needs "
                                          f"sasl.mechanism ({', '.join(MECHANISMS)})")
            if self.sasl_mechanism not in MECHANISMS:
                raise SecurityConfigError(f"sasl.mechanism {self.sasl_mechanism!r} is not "
                                          f"supported; use one of {', '.join(MECHANISMS)}")
            if not self.sasl_username or self.sasl_password is None:
                raise SecurityConfigError(
                    f"SASL {self.sasl_mechanism} needs a user name and password: set "
                    "sasl.username and sasl.password, or sasl.jaas.config with "
                    'username="..." password="..."')
        if self.ssl_key_location and not self.ssl_certificate_location:
            raise SecurityConfigError("ssl.key.location needs ssl.certificate.location")


def _bool(p: Mapping[str, str], key: str, default: bool) -> bool:
    raw = p.get(key)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise SecurityConfigError(f"{key} must be true or false, not {raw!r}")


def _endpoint_check(raw: str | None) -> bool:
    # librdkafka >= 2.0 and Java clients default to https (check the host name).
    if raw is None or raw.lower() == "https":
        return True
    if raw == "" or raw.lower() == "none":
        return False
    raise SecurityConfigError(f"ssl.endpoint.identification.algorithm must be https or none, "
                              f"not {raw!r}")


# key="value" or key=value; a value in quotes may hold \" and \\ (JAAS string escapes).
_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
_JAAS_HEAD = re.compile(r"^\s*[A-Za-z_][\w.$]*\s+(required|requisite|sufficient|optional)\b")


def parse_jaas_options(text: str) -> dict[str, str]:
    """The options of a one-module JAAS line (``... LoginModule required username="u"
    password="p";``).

    Raises:
        SecurityConfigError: not a JAAS login-module line.
    """
    head = _JAAS_HEAD.match(text)
    if head is None:
        raise SecurityConfigError("sasl.jaas.config must look like '<LoginModule class> "
                                  "required username=\"...\" password=\"...\";'")
    out = {}
    for m in _JAAS_OPTION.finditer(text, head.end()):
        quoted, bare = m.group(2), m.group(3)
        out[m.group(1)] = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare)
    return out


def librdkafka_config(props: Mapping[str, Any]) -> dict[str, str]:
    """Security properties in the names librdkafka (confluent-kafka) takes.

    librdkafka has no ``sasl.jaas.config`` and no PEM trust/key stores: the JAAS user name and
    password become ``sasl.username``/``sasl.password``, ``ssl.truststore.location`` becomes
    ``ssl.ca.location``, a PEM ``ssl.keystore.location`` (key and chain in one file) becomes
    ``ssl.certificate.location`` and ``ssl.key.location``. Other properties pass unchanged.
    Only PEM stores translate: librdkafka's own ``ssl.keystore.location`` is PKCS#12, so with
    ``ssl.keystore.type`` other than PEM the keystore properties stay as they are.

    Raises:
        SecurityConfigError: an unreadable ``sasl.jaas.config``.
    """
    p = {str(k): str(v) for k, v in props.items() if v is not None}
    out = dict(p)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        opts = parse_jaas_options(jaas)
        for key in ("username", "password"):
            if key in opts:
                out.setdefault(f"sasl.{key}", opts[key])
    if out.pop("ssl.truststore.type", "PEM").upper() == "PEM" and "ssl.truststore.location" in out:
        out.setdefault("ssl.ca.location", out.pop("ssl.truststore.location"))
    if "ssl.truststore.certificates" in out:
        out.setdefault("ssl.ca.pem", out.pop("ssl.truststore.certificates"))
    keystore_type = p.get("ssl.keystore.type", "PEM").upper()
    if keystore_type == "PEM":
        out.pop("ssl.keystore.type", None)
        if "ssl.keystore.location" in out:
            location = out.pop("ssl.keystore.location")
            out.setdefault("ssl.certificate.location", location)
            out.setdefault("ssl.key.location", location)
        if "ssl.keystore.password" in out:
            out.setdefault("ssl.key.password", out.pop("ssl.keystore.password"))
    return out


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` text (``--command-config``) as a dict.

    ``#`` and ``!`` start comments, a line ending in an odd number of backslashes continues on
    the next, and the key ends at the first ``=`` or ``:`` (values may contain both).
    """
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        cut = min((i for i in (logical.find("="), logical.find(":")) if i >= 0),
                  default=len(logical))
        key, value = logical[:cut].strip(), logical[cut + 1:].strip()
        if key:
            out[key] = value
        logical = ""
    return out


def ssl_context(settings: SecuritySettings) -> ssl.SSLContext | None:
    """The client TLS context for the settings (None for PLAINTEXT and SASL_PLAINTEXT).

    Raises:
        SecurityConfigError: a certificate, key or CA file cannot be read or used (the message
            names the property, never a password).
    """
    if not settings.uses_tls:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.ssl_ca_location or settings.ssl_ca_pem:
        try:
            if settings.ssl_ca_location:
                ctx.load_verify_locations(cafile=settings.ssl_ca_location)
            if settings.ssl_ca_pem:
                ctx.load_verify_locations(cadata=settings.ssl_ca_pem)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(f"cannot load the CA certificates (ssl.ca.location="
                                      f"{settings.ssl_ca_location}): {_why(exc)}") from None
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.ssl_certificate_location:
        try:
            ctx.load_cert_chain(settings.ssl_certificate_location, settings.ssl_key_location,
                                password=settings.ssl_key_password or None)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(
                f"cannot load the client certificate (ssl.certificate.location="
                f"{settings.ssl_certificate_location}, ssl.key.location="
                f"{settings.ssl_key_location}): {_why(exc)}; check the files and "
                "ssl.key.password") from None
    ctx.check_hostname = settings.check_hostname and settings.verify_certificate
    if not settings.verify_certificate:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return type(exc).__name__


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
