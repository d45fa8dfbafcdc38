"""TLS for SSL and SASL_SSL listeners: Kafka's ``ssl.*`` configs to a server ``ssl.SSLContext``,
and the principal of a client certificate.

Configs (each may carry the ``listener.name.<listener>.`` prefix, which wins):

- ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (one file: private key and certificate
  chain) or inline ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``; ``ssl.key.password``
  decrypts an encrypted key. JKS and PKCS12 stores are refused with a message (convert to PEM).
- ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` or inline
  ``ssl.truststore.certificates``: the CAs client certificates must chain to.
- ``ssl.client.auth``: none (no certificate asked), requested (verified if sent), required.
- ``ssl.enabled.protocols``: TLSv1.2 and/or TLSv1.3 (minimum and maximum version).
- ``ssl.cipher.suites``: TLS 1.2 suites by IANA name (Kafka's, e.g.
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) or OpenSSL name. Python's ``ssl`` cannot restrict
  TLS 1.3 suites (OpenSSL's ``SSL_CTX_set_ciphersuites`` is not exposed): TLS 1.3 names are
  accepted, and all of OpenSSL's TLS 1.3 suites stay on while TLSv1.3 is enabled. A list of only
  TLS 1.3 suites leaves TLS 1.2 without ciphers, so the context then serves TLS 1.3 only.

Inline PEM: Python's ``ssl`` loads a private key only from a file. The inline key and chain are
written to a file created 0600 inside a fresh 0700 directory (``tempfile.mkdtemp``), loaded, and
both are removed before this module returns, also on error. Inline values may be given on one
line (Kafka accepts that); the base64 body is re-wrapped for OpenSSL.

Principal: ``User:<subject DN>`` in RFC 2253 form as Java's ``X500Principal.getName()`` prints
it (most specific RDN first: ``CN=alice,OU=eng,O=Acme``; Java also escapes '=' and '#'), then
``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``: ``DEFAULT`` and
``RULE:pattern/replacement/[LU]``, first match wins; a DN no rule matches is an error). A
connection without a client certificate is ``User:ANONYMOUS``. Attributes without an RFC 2253
keyword are printed as ``OID=#hex`` of their DER value like Java does; ``getpeercert()`` does
not keep the ASN.1 string type, so it is assumed (IA5String for emailAddress, PrintableString
for serialNumber and dnQualifier, else UTF8String: the defaults of OpenSSL and of
``cryptography``).

Building a context reads files; everything else here is pure.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.security.listeners import listener_config, listener_prefix

ANONYMOUS = "User:ANONYMOUS"


class TlsConfigError(ValueError):
    """TLS settings that cannot be used; the message names the config (and file)."""


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule matches a certificate's DN (the connection must
    be refused, as in Kafka)."""


# ------------------------------------------------------------------------------- settings

@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The ``ssl.*`` values of one listener, each with the config name it came from (for
    messages). Secrets are kept out of ``repr``."""

    listener: str
    values: Mapping[str, Any] = field(repr=False)
    sources: Mapping[str, str] = field(repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], listener_name: str) -> TlsSettings:
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        prefix = listener_prefix(listener_name)
        for key in _KEYS:
            if config.get(prefix + key) is not None:
                values[key], sources[key] = config[prefix + key], prefix + key
            elif config.get(key) is not None:
                values[key], sources[key] = config[key], key
        return cls(listener_name, values, sources)

    def get(self, key: str, default: Any = None) -> Any:
        v = self.values.get(key)
        return default if v is None or v == "" else v

    def name(self, key: str) -> str:
        """The config name a value came from (the prefixed one if that was used)."""
        return self.sources.get(key, key)


_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.key",
         "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.truststore.type",
         "ssl.truststore.location", "ssl.truststore.certificates", "ssl.client.auth",
         "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.principal.mapping.rules")

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                          "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                          "TLS_AES_128_CCM_8_SHA256"})


def server_context(config: Mapping[str, Any], listener_name: str) -> ssl.SSLContext:
    """The server TLS context of a listener (see the module doc).

    Raises:
        TlsConfigError: a missing or unusable setting, file, key or password.
    """
    return build_server_context(TlsSettings.from_config(config, listener_name))


def build_server_context(s: TlsSettings) -> ssl.SSLContext:
    """Raises:
        TlsConfigError: see ``server_context``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(ctx, s)
    _set_ciphers(ctx, s)
    _load_keystore(ctx, s)
    mode = str(s.get("ssl.client.auth", "none")).lower()
    if mode not in _CLIENT_AUTH:
        raise TlsConfigError(f"{s.name('ssl.client.auth')}={mode}: must be none, requested or "
                             "required")
    loaded = _load_truststore(ctx, s)
    if mode != "none" and not loaded:
        raise TlsConfigError(
            f"{s.name('ssl.client.auth')}={mode} on listener {s.listener} needs the CAs of "
            "client certificates: set ssl.truststore.location or ssl.truststore.certificates")
    ctx.verify_mode = _CLIENT_AUTH[mode]
    return ctx


def _set_protocols(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    key = "ssl.enabled.protocols"
    names = [p.strip() for p in str(s.get(key, "TLSv1.2,TLSv1.3")).split(",") if p.strip()]
    if not names:
        raise TlsConfigError(f"{s.name(key)} is empty")
    bad = [n for n in names if n not in _PROTOCOLS]
    if bad:
        raise TlsConfigError(f"{s.name(key)}: {', '.join(bad)} not supported (use TLSv1.2, "
                             "TLSv1.3)")
    versions = sorted(_PROTOCOLS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def openssl_cipher_name(name: str) -> str:
    """An IANA TLS 1.2 suite name (Kafka's) as OpenSSL names it; other names unchanged."""
    m = re.fullmatch(r"TLS_(ECDHE_ECDSA|ECDHE_RSA|DHE_RSA|DHE_DSS|RSA)_WITH_"
                     r"(?:AES_(128|256)_(GCM|CBC|CCM_8|CCM)|(CHACHA20_POLY1305))(?:_(SHA\d*))?",
                     name)
    if m is None:
        return name
    kx, bits, mode, chacha, mac = m.groups()
    prefix = "" if kx == "RSA" else kx.replace("_", "-") + "-"
    if chacha:
        body = "CHACHA20-POLY1305"
    elif mode == "GCM":
        body = f"AES{bits}-GCM-{mac}"
    elif mode == "CBC":
        body = f"AES{bits}-{mac}"
    else:
        body = f"AES{bits}-{mode.replace('_', '')}"
    return prefix + body


def _set_ciphers(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    key = "ssl.cipher.suites"
    names = [c.strip() for c in str(s.get(key, "")).split(",") if c.strip()]
    if not names:
        return
    tls12 = [n for n in names if n not in TLS13_SUITES]
    if not tls12:
        # Only TLS 1.3 suites: TLS 1.2 would have no cipher at all.
        if ctx.maximum_version < ssl.TLSVersion.TLSv1_3:
            raise TlsConfigError(f"{s.name(key)} has only TLS 1.3 suites but TLSv1.3 is not in "
                                 "ssl.enabled.protocols")
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        return
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    known = {c["name"] for c in probe.get_ciphers()}
    wanted = [openssl_cipher_name(n) for n in tls12]
    unknown = [n for n, w in zip(tls12, wanted, strict=True) if w not in known]
    if unknown:
        raise TlsConfigError(f"{s.name(key)}: unknown or unavailable cipher suite(s) "
                             f"{', '.join(unknown)}")
    try:
        ctx.set_ciphers(":".join(wanted))
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{s.name(key)}: OpenSSL accepts none of them ({exc})") from None


def _store_type(s: TlsSettings, key: str) -> None:
    kind = str(s.get(key, "JKS")).upper()
    if kind != "PEM":
        raise TlsConfigError(f"{s.name(key)}={kind} is not supported by Shoal; convert the "
                             f"store to PEM and set {key}=PEM")


def _password_callback(s: TlsSettings, where: str, asked: list[bool]) -> Callable[[], str]:
    """OpenSSL asks for a password only for an encrypted key. Without ``ssl.key.password`` it
    would prompt on the terminal; this fails with a clear message instead."""
    password = s.get("ssl.key.password")

    def callback() -> str:
        asked.append(True)
        if password is None:
            raise TlsConfigError(f"{where}: the private key is encrypted; set "
                                 "ssl.key.password")
        return str(password)

    return callback


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    location = s.get("ssl.keystore.location")
    key, chain = s.get("ssl.keystore.key"), s.get("ssl.keystore.certificate.chain")
    if location is None and key is None and chain is None:
        raise TlsConfigError(
            f"TLS listener {s.listener} needs a key store: ssl.keystore.type=PEM with "
            "ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain")
    _store_type(s, "ssl.keystore.type")
    if location is not None:
        if key is not None or chain is not None:
            raise TlsConfigError(f"{s.name('ssl.keystore.location')} and inline "
                                 "ssl.keystore.key/ssl.keystore.certificate.chain are "
                                 "exclusive; set one")
        where = f"{s.name('ssl.keystore.location')}={location}"
        _load_chain(ctx, str(location), where, s)
        return
    if key is None or chain is None:
        missing = "ssl.keystore.key" if key is None else "ssl.keystore.certificate.chain"
        raise TlsConfigError(f"inline PEM key store on listener {s.listener}: {missing} is "
                             "missing")
    where = f"{s.name('ssl.keystore.key')} + {s.name('ssl.keystore.certificate.chain')}"
    directory = tempfile.mkdtemp(prefix="shoal-tls-")  # 0700
    try:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii", errors="strict") as f:
            f.write(normalize_pem(str(key)) + normalize_pem(str(chain)))
        _load_chain(ctx, path, where, s)
    except UnicodeEncodeError:
        raise TlsConfigError(f"{where}: PEM must be ASCII") from None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _load_chain(ctx: ssl.SSLContext, path: str, where: str, s: TlsSettings) -> None:
    asked: list[bool] = []
    try:
        ctx.load_cert_chain(path, password=_password_callback(s, where, asked))
    except FileNotFoundError:
        raise TlsConfigError(f"{where}: no such file") from None
    except PermissionError:
        raise TlsConfigError(f"{where}: permission denied") from None
    except ssl.SSLError as exc:
        hint = ("wrong ssl.key.password?" if asked
                else "it must hold a PEM private key and its certificate chain")
        raise TlsConfigError(f"{where}: cannot load the key store ({exc.reason or exc}); "
                             f"{hint}") from None
    except OSError as exc:
        raise TlsConfigError(f"{where}: {exc.strerror or exc}") from None


def _load_truststore(ctx: ssl.SSLContext, s: TlsSettings) -> bool:
    location = s.get("ssl.truststore.location")
    inline = s.get("ssl.truststore.certificates")
    if location is None and inline is None:
        return False
    _store_type(s, "ssl.truststore.type")
    if location is not None and inline is not None:
        raise TlsConfigError(f"{s.name('ssl.truststore.location')} and "
                             f"{s.name('ssl.truststore.certificates')} are exclusive; set one")
    try:
        if location is not None:
            where = f"{s.name('ssl.truststore.location')}={location}"
            ctx.load_verify_locations(cafile=str(location))
        else:
            where = s.name("ssl.truststore.certificates")
            ctx.load_verify_locations(cadata=normalize_pem(str(inline)))
    except FileNotFoundError:
        raise TlsConfigError(f"{where}: no such file") from None
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(f"{where}: not PEM CA certificates ({exc})") from None
    except OSError as exc:
        raise TlsConfigError(f"{where}: {exc.strerror or exc}") from None
    return True


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def normalize_pem(text: str) -> str:
    """PEM blocks with their base64 re-wrapped at 64 columns, so a value given on one line (as
    Kafka allows) loads; blocks with headers (legacy encrypted keys) are kept as they are.

    Raises:
        TlsConfigError: no PEM block at all.
    """
    blocks = []
    for m in _PEM_BLOCK.finditer(text):
        label, body = m.group(1), m.group(2)
        if ":" in body:
            blocks.append(m.group(0).strip() + "\n")
            continue
        b64 = "".join(body.split())
        lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
        blocks.append(f"-----BEGIN {label}-----\n" + "\n".join(lines)
                      + f"\n-----END {label}-----\n")
    if not blocks:
        raise TlsConfigError("inline PEM value has no -----BEGIN ...----- block")
    return "".join(blocks)


# ------------------------------------------------------------------------------- principal

# RFC 2253 keywords Java's X500Principal.getName() prints, by the attribute names in
# ssl.getpeercert().
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L",
             "stateOrProvinceName": "ST", "organizationName": "O",
             "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
# Other attributes: (OID, DER string tag). 0x16 IA5String, 0x13 PrintableString, 0x0c UTF8.
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13),
         "dnQualifier": ("2.5.4.46", 0x13), "title": ("2.5.4.12", 0x0C),
         "surname": ("2.5.4.4", 0x0C), "givenName": ("2.5.4.42", 0x0C),
         "initials": ("2.5.4.43", 0x0C), "generationQualifier": ("2.5.4.44", 0x0C),
         "pseudonym": ("2.5.4.65", 0x0C), "businessCategory": ("2.5.4.15", 0x0C),
         "postalCode": ("2.5.4.17", 0x0C), "name": ("2.5.4.41", 0x0C),
         "description": ("2.5.4.13", 0x0C)}
_OID_RE = re.compile(r"^\d+(\.\d+)+$")


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    n = len(data)
    if n < 0x80:
        length = bytes([n])
    else:
        nb = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(nb)]) + nb
    return "#" + (bytes([tag]) + length + data).hex()


def _escape(value: str) -> str:
    """RFC 2253 section 2.4 escaping as Java prints it: besides what the RFC requires, Java also
    escapes '=' and every '#' (not only a leading one), and every leading or trailing space."""
    escaped = "".join("\\" + ch if ch in ',=+<>#;"\\' else ch for ch in value)
    body = escaped.strip(" \r")
    if not body:
        return "".join("\\" + ch for ch in escaped)
    start = escaped.index(body)
    lead, trail = escaped[:start], escaped[start + len(body):]
    return "".join("\\" + c for c in lead) + body + "".join("\\" + c for c in trail)


def dn_from_peercert(cert: Mapping[str, Any]) -> str:
    """The subject DN of ``SSLObject.getpeercert()`` in RFC 2253 form (RDNs most specific
    first, AVAs of one RDN joined by '+')."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        avas = []
        for attr, value in rdn:
            if attr in _KEYWORDS:
                avas.append(f"{_KEYWORDS[attr]}={_escape(value)}")
            elif attr in _OIDS:
                oid, tag = _OIDS[attr]
                avas.append(f"{oid}={_der_hex(tag, value)}")
            elif _OID_RE.match(attr):
                avas.append(f"{attr}={_der_hex(0x0C, value)}")
            else:
                avas.append(f"{attr}={_escape(value)}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One rule: DEFAULT (``pattern`` None: the DN itself) or RULE:pattern/replacement/[LU].
    ``template`` is the parsed replacement: literal text and group references."""

    pattern: re.Pattern[str] | None
    template: tuple[str | int | tuple[str], ...] = ()
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self._expand, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" \
            else result

    def _expand(self, m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else m.group(p if isinstance(p, int) else p[0])
                       or "" for p in self.template)


def parse_replacement(replacement: str, pattern: re.Pattern[str]
                      ) -> tuple[str | int | tuple[str], ...]:
    """Java's replacement syntax: ``$n`` (further digits join while the group exists),
    ``${name}``, and ``\\x`` for a literal x.

    Raises:
        ValueError: a reference to a group the pattern does not have.
    """
    out: list[str | int | tuple[str]] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and replacement[i + 1:i + 2] == "{":
            end = replacement.find("}", i)
            name = replacement[i + 2:end] if end > 0 else ""
            if name not in pattern.groupindex:
                raise ValueError(f"no group named {name!r}")
            out.append((name,))
            i = end + 1
        elif c == "$":
            if not replacement[i + 1:i + 2].isdigit() or int(replacement[i + 1]) > pattern.groups:
                raise ValueError(f"no group {replacement[i + 1:i + 2] or '(none after $)'}")
            j = i + 2
            while j < n and replacement[j].isdigit() and int(replacement[i + 1:j + 1]) <= \
                    pattern.groups:
                j += 1
            out.append(int(replacement[i + 1:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return tuple(out)


def _read_until_slash(text: str, i: int) -> tuple[str, int]:
    """Read up to an unescaped '/', returning (text before it, index after it)."""
    start = i
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 2
        elif text[i] == "/":
            return text[start:i], i + 1
        else:
            i += 1
    raise ValueError("missing '/'")


def parse_mapping_rules(rules: str | None, where: str = "ssl.principal.mapping.rules"
                        ) -> list[MappingRule]:
    """Parse Kafka's rules: comma- or newline-separated ``DEFAULT`` and
    ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` (lower/upper-case the result).
    A pattern may hold commas; ``\\/`` is a slash inside a pattern or replacement. Empty means
    DEFAULT.

    Raises:
        TlsConfigError: a rule that is neither form, or a pattern that is not a regex.
    """
    text = (rules or "").strip()
    if not text:
        return [MappingRule(None)]
    out: list[MappingRule] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        if text.startswith("DEFAULT", i) and (i + 7 == n or text[i + 7] in " \t\r\n,"):
            out.append(MappingRule(None))
            i += 7
            continue
        if not text.startswith("RULE:", i):
            bad = re.split(r"[,\n]", text[i:], maxsplit=1)[0].strip()
            raise TlsConfigError(f"{where}: invalid rule {bad!r} (expected DEFAULT or "
                                 "RULE:pattern/replacement/[LU])")
        try:
            pattern, j = _read_until_slash(text, i + 5)
            replacement, j = _read_until_slash(text, j)
        except ValueError:
            raise TlsConfigError(f"{where}: invalid rule {text[i:].split(chr(10))[0]!r} "
                                 "(expected RULE:pattern/replacement/[LU])") from None
        case = text[j] if j < n and text[j] in "LU" else ""
        j += len(case)
        # Anything up to the next separator is ignored, as in Kafka.
        while j < n and text[j] not in ",\n":
            j += 1
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise TlsConfigError(f"{where}: pattern {pattern!r} is not a regular expression "
                                 f"({exc})") from None
        try:
            template = parse_replacement(replacement, compiled)
        except ValueError as exc:
            raise TlsConfigError(f"{where}: replacement {replacement!r}: {exc}") from None
        out.append(MappingRule(compiled, template, case))
        i = j
    return out


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` applied to DNs (first rule that matches wins)."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        """Raises:
            TlsConfigError: see ``parse_mapping_rules``.
        """
        self.rules: Sequence[MappingRule] = parse_mapping_rules(rules)

    def name(self, dn: str) -> str:
        """Raises:
            NoMatchingRule: no rule matches ``dn``.
        """
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {dn!r}")


def principal_mapper(config: Mapping[str, Any], listener_name: str) -> PrincipalMapper:
    """The listener's ``ssl.principal.mapping.rules`` (prefixed value first).

    Raises:
        TlsConfigError: see ``parse_mapping_rules``.
    """
    return PrincipalMapper(listener_config(config, listener_name, "ssl.principal.mapping.rules",
                                           "DEFAULT"))


def tls_principal(peercert: Mapping[str, Any] | None, mapper: PrincipalMapper) -> str:
    """``User:<mapped DN>`` of a verified client certificate, or ``User:ANONYMOUS`` without one
    (``getpeercert()`` gives None or {} then).

    Raises:
        NoMatchingRule: no rule matches the certificate's DN.
    """
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    return "User:" + mapper.name(dn_from_peercert(peercert))
