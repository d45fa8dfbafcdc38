"""TLS and basic auth of the metrics endpoint, from a Prometheus exporter-toolkit web config file.

Concept: ``metrics.web.config.file`` names a YAML file in the format every Prometheus exporter
reads with ``--web.config.file`` (prometheus/exporter-toolkit, ``docs/web-configuration.md``), so
an operator's existing file and Prometheus' ``scrape_config`` (``scheme: https``, ``tls_config``,
``basic_auth``) work unchanged::

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file's directory
      key_file: server.key
      client_ca_file: ca.pem         # with client_auth_type
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12             # optional; TLS10..TLS13
      max_version: TLS13             # optional
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

Supported ``client_auth_type`` values: NoClientCert (the default), VerifyClientCertIfGiven and
RequireAndVerifyClientCert. RequestClientCert and RequireAnyClientCert ask for a certificate
without verifying it, which Python's ``ssl`` cannot do; they are refused rather than weakened or
strengthened silently, as is every other key the file may hold in exporter-toolkit's format
(``http_server_config``, ``cipher_suites``, ...): a setting the broker would ignore is an error.

Basic auth: a request without valid credentials gets 401 with ``WWW-Authenticate: Basic``.
bcrypt is slow on purpose, so ``BasicAuth.check`` is meant for a worker thread (the server runs it
on one thread of its own); a (user, password) pair that passed is remembered, digested, so a
scraper's every later request costs one dict look-up. An unknown user is still checked against a
fixed hash, so the answer time does not tell which users exist (exporter-toolkit does the same).

Invariant: ``load_web_config`` either returns a usable config or raises ``WebConfigError`` naming
the file and the setting; the broker refuses to start on it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

TOP_KEYS = frozenset({"tls_server_config", "basic_auth_users"})
TLS_KEYS = frozenset({"cert_file", "key_file", "client_ca_file", "client_auth_type",
                      "min_version", "max_version"})
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Checked for unknown users so that their answer takes as long as a wrong password's.
_DUMMY_HASH = b"$2b$10$0eo5eJIixQB9CM2eGn7Zj.p7KEMnRuaVVKGoTo.EvQm.nACSs9P/a"
_REMEMBERED = 64  # (user, password) pairs that passed, kept to skip bcrypt next time


class WebConfigError(ValueError):
    """The web config file cannot be used; the message names the file and the setting."""


@dataclass(frozen=True)
class WebConfig:
    """What the file asks for: a server TLS context (None: plain HTTP) and basic-auth users
    (empty: no authentication)."""

    ssl: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)


def load_web_config(path: str | Path) -> WebConfig:
    """Read and check an exporter-toolkit web config file; certificates and keys are loaded now.

    Raises:
        WebConfigError: the file cannot be read or parsed, has an unsupported key or value, or
            names certificate files that cannot be loaded.
    """
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise WebConfigError(f"metrics.web.config.file {path}: {exc}") from exc
    doc = {} if doc is None else doc
    where = f"metrics.web.config.file {path}"
    if not isinstance(doc, dict):
        raise WebConfigError(f"{where}: expected a mapping at the top level")
    _no_unknown_keys(doc, TOP_KEYS, where)
    tls = doc.get("tls_server_config")
    users = doc.get("basic_auth_users")
    return WebConfig(
        ssl=_tls_context(tls, path.parent, f"{where}: tls_server_config") if tls else None,
        users=_users(users, f"{where}: basic_auth_users") if users else {})


def _no_unknown_keys(doc: dict[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise WebConfigError(f"{where}: {', '.join(unknown)} not supported by Shoal (supported: "
                             f"{', '.join(sorted(known))})")


def _tls_context(tls: Any, base: Path, where: str) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise WebConfigError(f"{where}: expected a mapping")
    _no_unknown_keys(tls, TLS_KEYS, where)
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise WebConfigError(f"{where}: cert_file and key_file are both required")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # exporter-toolkit's default minimum
    for key, attr in (("min_version", "minimum_version"), ("max_version", "maximum_version")):
        if key in tls:
            if tls[key] not in _VERSIONS:
                raise WebConfigError(f"{where}: {key} {tls[key]!r} must be one of "
                                     f"{', '.join(_VERSIONS)}")
            setattr(ctx, attr, _VERSIONS[tls[key]])
    try:
        ctx.load_cert_chain(base / str(tls["cert_file"]), base / str(tls["key_file"]))
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"{where}: cert_file/key_file: {exc}") from exc
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(
            f"{where}: client_auth_type {auth!r} is not supported (supported: "
            f"{', '.join(_CLIENT_AUTH)}; RequestClientCert and RequireAnyClientCert accept "
            "unverified certificates, which Shoal does not)")
    ca = tls.get("client_ca_file")
    if ca and auth == "NoClientCert":
        raise WebConfigError(f"{where}: client_ca_file is set without a client_auth_type that "
                             "verifies client certificates")
    if auth != "NoClientCert":
        if not ca:
            raise WebConfigError(f"{where}: client_auth_type {auth} needs client_ca_file")
        try:
            ctx.load_verify_locations(cafile=base / str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{where}: client_ca_file: {exc}") from exc
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def _users(users: Any, where: str) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise WebConfigError(f"{where}: expected a mapping of user name to bcrypt hash")
    out: dict[str, bytes] = {}
    for user, hashed in users.items():
        text = str(hashed)
        if not text.startswith(("$2a$", "$2b$", "$2y$")):
            raise WebConfigError(f"{where}: the password of user {user!r} must be a bcrypt hash "
                                 "($2a$, $2b$ or $2y$), never the password itself")
        out[str(user)] = text.encode()
    return out


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against the configured bcrypt hashes."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._passed: dict[bytes, None] = {}  # digests of (user, password) pairs that passed

    @staticmethod
    def credentials(header: str | None) -> tuple[str, str] | None:
        """(user, password) of a ``Basic`` Authorization header value, or None if malformed."""
        if not header:
            return None
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        return (user, password) if sep else None

    @staticmethod
    def _digest(user: str, password: str) -> bytes:
        return hashlib.sha256(f"{len(user)}:{user}:{password}".encode()).digest()

    def remembered(self, user: str, password: str) -> bool:
        """Whether this pair passed ``check`` before and was ``remember``-ed (cheap)."""
        return self._digest(user, password) in self._passed

    def remember(self, user: str, password: str) -> None:
        """Note a pair that passed ``check`` (on the thread that calls ``remembered``)."""
        if len(self._passed) >= _REMEMBERED:
            self._passed.pop(next(iter(self._passed)))
        self._passed[self._digest(user, password)] = None

    def check(self, user: str, password: str) -> bool:
        """Whether the pair matches a configured user (bcrypt: slow, call it in a worker; it
        reads nothing that changes)."""
        hashed = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), hashed if hashed is not None else _DUMMY_HASH)
        except ValueError:  # a malformed hash in the file: nobody logs in as that user
            ok = False
        return ok and hashed is not None
