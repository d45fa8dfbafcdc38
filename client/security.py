"""Client security settings: Kafka client properties to one frozen dataclass.

One module for every Shoal client: the blocking shell of the ``shoal`` CLI, the asyncio
``ShareConsumer`` and, through it, the Spark source. It does no network I/O:

- ``SecuritySettings.from_properties``: Kafka's client property names (``security.protocol``,
  ``sasl.mechanism``, ``sasl.username``/``sasl.password`` as librdkafka names them or
  ``sasl.jaas.config`` as Java clients do, ``ssl.ca.location``, ``ssl.certificate.location``,
  ``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``, and the
  Java PEM names ``ssl.truststore.location`` / ``ssl.keystore.location``) into one frozen
  dataclass. Properties that are not about security are ignored; an ``ssl.``/``sasl.`` property
  this client cannot honour is an error, so a misconfigured client fails instead of silently
  connecting with weaker settings.
- The TLS context (``client/core/tls.py``: ``ssl_context``) and the SASL exchange
  (``client/core/sasl.py``: ``SaslExchange``) are built from these settings by the client core.

Passwords never appear in ``repr``, messages or logs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SecurityConfigError",
    "SecuritySettings",
    "is_security_property",
    "librdkafka_config",
    "parse_jaas_options",
    "parse_properties",
]


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
