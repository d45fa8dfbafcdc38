"""TLS server contexts from Kafka's ssl.* configs, with a CA and certificates made at test time
(trustme, cryptography; no key is committed), handshakes over memory BIOs (no sockets), client
certificate principals and ssl.principal.mapping.rules."""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker.security.tls import (
    ANONYMOUS,
    NoMatchingRule,
    PrincipalMapper,
    TlsConfigError,
    dn_from_peercert,
    normalize_pem,
    openssl_cipher_name,
    parse_mapping_rules,
    principal_mapper,
    server_context,
    tls_principal,
)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_cert(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("localhost", "127.0.0.1")


@pytest.fixture
def pki(tmp_path: Path, ca: trustme.CA, server_cert: trustme.LeafCert) -> dict[str, str]:
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(server_cert.private_key_and_cert_chain_pem.bytes())
    truststore = tmp_path / "ca.pem"
    truststore.write_bytes(ca.cert_pem.bytes())
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore)}


def _client(ca: trustme.CA, cert: trustme.LeafCert | None = None,
            version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext
               ) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run a TLS handshake in memory; raises the first side's ssl.SSLError."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(50):
        for side, obj, out, peer_in in (("c", client, c_out, s_in), ("s", server, s_out, c_in)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                peer_in.write(data)
        if all(done.values()):
            # TLS 1.3: the server learns of a rejected client certificate one flight later.
            client.write(b"ping")
            s_in.write(c_out.read())
            assert server.read(4) == b"ping"
            return client, server
    raise AssertionError("handshake did not finish")


# --------------------------------------------------------------------------------- context

def test_pem_keystore_file_and_no_client_auth(pki: dict[str, str], ca: trustme.CA) -> None:
    ctx = server_context(pki, "SSL")
    assert ctx.verify_mode == ssl.CERT_NONE
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2,
                                                          ssl.TLSVersion.TLSv1_3)
    _, server = _handshake(ctx, _client(ca))
    assert tls_principal(server.getpeercert(), PrincipalMapper()) == ANONYMOUS


def test_inline_pem_even_on_one_line_leaves_no_file(ca: trustme.CA,
                                                    server_cert: trustme.LeafCert,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    key = server_cert.private_key_pem.bytes().decode()
    chain = "".join(b.bytes().decode() for b in server_cert.cert_chain_pems)
    config = {"ssl.keystore.type": "PEM", "ssl.keystore.key": key.replace("\n", " "),
              "ssl.keystore.certificate.chain": chain.replace("\n", ""),
              "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": ca.cert_pem.bytes().decode().replace("\n", " ")}
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        made.append(real_mkdtemp(*args, **kwargs))
        assert os.stat(made[-1]).st_mode & 0o777 == 0o700
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    ctx = server_context(config, "SSL")
    assert len(made) == 1 and not os.path.exists(made[0])
    _handshake(ctx, _client(ca))


def _encrypted_key_pem(cert: trustme.LeafCert, password: bytes, legacy: bool) -> bytes:
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    fmt = (serialization.PrivateFormat.TraditionalOpenSSL if legacy
           else serialization.PrivateFormat.PKCS8)
    return key.private_bytes(serialization.Encoding.PEM, fmt,
                             serialization.BestAvailableEncryption(password))


@pytest.mark.parametrize("legacy", [False, True], ids=["pkcs8", "traditional"])
def test_encrypted_key_with_ssl_key_password(tmp_path: Path, ca: trustme.CA,
                                             server_cert: trustme.LeafCert, legacy: bool) -> None:
    pem = _encrypted_key_pem(server_cert, b"key-secret", legacy)
    chain = b"".join(b.bytes() for b in server_cert.cert_chain_pems)
    path = tmp_path / "enc.pem"
    path.write_bytes(pem + chain)
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)}
    _handshake(server_context({**base, "ssl.key.password": "key-secret"}, "SSL"), _client(ca))
    with pytest.raises(TlsConfigError, match=rf"ssl.keystore.location={path}: .*wrong "
                                             "ssl.key.password"):
        server_context({**base, "ssl.key.password": "nope"}, "SSL")
    with pytest.raises(TlsConfigError, match="the private key is encrypted; set ssl.key.password"):
        server_context(base, "SSL")
    # Inline, too.
    inline = {"ssl.keystore.type": "PEM", "ssl.keystore.key": pem.decode(),
              "ssl.keystore.certificate.chain": chain.decode(), "ssl.key.password": "key-secret"}
    _handshake(server_context(inline, "SSL"), _client(ca))


@pytest.fixture(scope="module")
def alice(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("alice@example", common_name="alice", organization_name="Acme",
                         organization_unit_name="eng")


def test_client_auth_required(pki: dict[str, str], ca: trustme.CA,
                              alice: trustme.LeafCert) -> None:
    config = {**pki, "listener.name.ssl.ssl.client.auth": "required"}
    ctx = server_context(config, "SSL")
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    _, server = _handshake(ctx, _client(ca, alice))
    assert tls_principal(server.getpeercert(), PrincipalMapper()) == \
        "User:CN=alice,OU=eng,O=Acme"
    # Without a certificate, or with one from another CA: refused.
    with pytest.raises(ssl.SSLError):
        _handshake(ctx, _client(ca))
    stranger = trustme.CA().issue_cert("x", common_name="mallory")
    with pytest.raises(ssl.SSLError):
        _handshake(ctx, _client(ca, stranger))
    # Only the SSL listener asked for it.
    assert server_context(config, "SASL_SSL").verify_mode == ssl.CERT_NONE


def test_client_auth_requested(pki: dict[str, str], ca: trustme.CA,
                               alice: trustme.LeafCert) -> None:
    ctx = server_context({**pki, "ssl.client.auth": "requested"}, "SSL")
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    _, server = _handshake(ctx, _client(ca))
    assert tls_principal(server.getpeercert(), PrincipalMapper()) == ANONYMOUS
    _, server = _handshake(ctx, _client(ca, alice))
    assert tls_principal(server.getpeercert(), PrincipalMapper()).startswith("User:CN=alice")


def test_enabled_protocols(pki: dict[str, str], ca: trustme.CA) -> None:
    ctx = server_context({**pki, "ssl.enabled.protocols": "TLSv1.3"}, "SSL")
    with pytest.raises(ssl.SSLError):
        _handshake(ctx, _client(ca, version=ssl.TLSVersion.TLSv1_2))
    client, _ = _handshake(ctx, _client(ca))
    assert client.version() == "TLSv1.3"
    ctx = server_context({**pki, "ssl.enabled.protocols": "TLSv1.2"}, "SSL")
    assert _handshake(ctx, _client(ca))[0].version() == "TLSv1.2"


def test_cipher_suites(pki: dict[str, str], ca: trustme.CA) -> None:
    # trustme's default keys are ECDSA.
    ctx = server_context({**pki, "ssl.enabled.protocols": "TLSv1.2",
                          "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}, "SSL")
    client, _ = _handshake(ctx, _client(ca))
    cipher = client.cipher()
    assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    # Only TLS 1.3 suites: TLS 1.3 only.
    ctx = server_context({**pki, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "SSL")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


CIPHER_NAMES = [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
]


@pytest.mark.parametrize(("iana", "openssl"), CIPHER_NAMES, ids=[c for c, _ in CIPHER_NAMES])
def test_cipher_names(iana: str, openssl: str) -> None:
    assert openssl_cipher_name(iana) == openssl


BAD_CONTEXTS = [
    ({}, "TLS listener SSL needs a key store"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/x.jks"},
     "ssl.keystore.type=JKS is not supported by Shoal; convert the store to PEM"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent/server.pem"},
     "ssl.keystore.location=/nonexistent/server.pem: no such file"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "x"},
     "ssl.keystore.certificate.chain is missing"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "garbage",
      "ssl.keystore.certificate.chain": "garbage"}, "no -----BEGIN"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols: TLSv1.1 not supported"),
    ({"ssl.cipher.suites": "TLS_FOO_WITH_BAR"}, "unknown or unavailable cipher suite"),
    ({"ssl.client.auth": "always"}, "must be none, requested or required"),
    ({"listener.name.ssl.ssl.client.auth": "required", "ssl.truststore.location": None},
     "listener.name.ssl.ssl.client.auth=required on listener SSL needs the CAs"),
    ({"ssl.truststore.location": "/nonexistent/ca.pem"},
     "ssl.truststore.location=/nonexistent/ca.pem: no such file"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type=PKCS12 is not supported"),
]


@pytest.mark.parametrize(("override", "message"), BAD_CONTEXTS, ids=[m for _, m in BAD_CONTEXTS])
def test_bad_settings_name_the_config(pki: dict[str, str], override: dict[str, Any],
                                      message: str) -> None:
    config: dict[str, Any] = {} if not override or "ssl.keystore.type" in override else dict(pki)
    config.update(override)
    with pytest.raises(TlsConfigError) as info:
        server_context(config, "SSL")
    assert message in str(info.value)


def test_a_file_without_a_key_is_explained(tmp_path: Path, ca: trustme.CA) -> None:
    path = tmp_path / "only-cert.pem"
    path.write_bytes(ca.cert_pem.bytes())
    with pytest.raises(TlsConfigError, match=rf"ssl.keystore.location={path}: cannot load the "
                                             "key store .*private key and its certificate chain"):
        server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)}, "SSL")


def test_normalize_pem_keeps_headers() -> None:
    legacy = ("-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n"
              "\nAAAA\n-----END EC PRIVATE KEY-----")
    assert normalize_pem(legacy) == legacy + "\n"
    assert normalize_pem("-----BEGIN X-----" + "A" * 70 + "-----END X-----") == (
        "-----BEGIN X-----\n" + "A" * 64 + "\n" + "A" * 6 + "\n-----END X-----\n")


# ------------------------------------------------------------------------------ principals

def _cert(*rdns: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A getpeercert() dict: subject RDNs as encoded (least specific first)."""
    return {"subject": rdns}


DNS = [
    ("order", _cert((("countryName", "US"),), (("organizationName", "Acme"),),
                    (("organizationalUnitName", "eng"),), (("commonName", "alice"),)),
     "CN=alice,OU=eng,O=Acme,C=US"),
    ("escapes", _cert((("commonName", 'Smith, "J" + co;<x>\\'),)),
     'CN=Smith\\, \\"J\\" \\+ co\\;\\<x\\>\\\\'),
    ("hash, equals and spaces", _cert((("commonName", "#x#=  "),), (("localityName", "  y"),)),
     "L=\\ \\ y,CN=\\#x\\#\\=\\ \\ "),
    ("multi-valued rdn", _cert((("organizationName", "Acme"),),
                               (("commonName", "bob"), ("userId", "b1"))),
     "CN=bob+UID=b1,O=Acme"),
    ("email as OID", _cert((("commonName", "a"),), (("emailAddress", "a@b.c"),)),
     "1.2.840.113549.1.9.1=#1605614062 2e63".replace(" ", "") + ",CN=a"),
    ("all keywords", _cert((("domainComponent", "com"),), (("stateOrProvinceName", "CA"),),
                           (("streetAddress", "1 Main"),)),
     "STREET=1 Main,ST=CA,DC=com"),
]


@pytest.mark.parametrize(("case", "cert", "dn"), DNS, ids=[c for c, _, _ in DNS])
def test_dn_in_rfc2253_form(case: str, cert: dict[str, Any], dn: str) -> None:
    assert dn_from_peercert(cert) == dn


def test_dn_of_a_real_certificate_matches_cryptography(tmp_path: Path, pki: dict[str, str],
                                                       ca: trustme.CA) -> None:
    """A certificate made with cryptography, subject C, O, OU, CN, email: the DN seen through a
    handshake is what cryptography prints (RFC 4514 agrees with RFC 2253 here) except that
    Java, and we, print the email as an OID with its DER value."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "carol")])
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    pem = tmp_path / "carol.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
                    + cert.public_bytes(serialization.Encoding.PEM))
    client = _client(ca)
    client.load_cert_chain(str(pem))
    _, server = _handshake(server_context({**pki, "ssl.client.auth": "required"}, "SSL"),
                           client)
    peer = server.getpeercert()
    assert peer is not None
    dn = dn_from_peercert(peer)
    assert dn == subject.rfc4514_string() == "CN=carol,OU=eng,O=Acme\\, Inc,C=DE"


MAPPINGS = [
    ("DEFAULT", "CN=alice,OU=eng,O=Acme", "CN=alice,OU=eng,O=Acme"),
    ("", "CN=alice,OU=eng,O=Acme", "CN=alice,OU=eng,O=Acme"),
    ("RULE:^CN=(.*?),OU=.*$/$1/L", "CN=Alice,OU=eng,O=Acme", "alice"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/U,DEFAULT", "CN=bob,OU=ops,O=Acme", "BOB@OPS"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, DEFAULT", "CN=svc,OU=eng,O=Acme",
     "CN=svc,OU=eng,O=Acme"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\nDEFAULT", "CN=svc,OU=ServiceUsers,O=Acme", "svc"),
    ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L", "CN=Kafka.Server,O=X", "kafka.server"),
    ("RULE:^CN=(.*)$/user\\/$1/", "CN=eve", "user/eve"),
    ("RULE:^CN=([^,]*).*$/\\$1 is $1/", "CN=z,O=y", "$1 is z"),
    ("RULE:^CN=(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)$/$11$10$1$12/", "CN=abcdefghijk", "kjaa2"),
    ("RULE:^CN=(?P<who>[^,]*).*$/${who}/", "CN=named,O=y", "named"),
]


@pytest.mark.parametrize(("rules", "dn", "name"), MAPPINGS, ids=[r for r, _, _ in MAPPINGS])
def test_principal_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert PrincipalMapper(rules).name(dn) == name


def test_principal_mapper_per_listener() -> None:
    config = {"ssl.principal.mapping.rules": "DEFAULT",
              "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/U"}
    assert principal_mapper(config, "SSL").name("CN=al,O=x") == "AL"
    assert principal_mapper(config, "SASL_SSL").name("CN=al,O=x") == "CN=al,O=x"
    assert principal_mapper({}, "SSL").name("CN=al") == "CN=al"


def test_no_matching_rule_is_an_error() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=eng.*$/$1/")
    assert mapper.name("CN=a,OU=eng,O=x") == "a"
    with pytest.raises(NoMatchingRule, match="CN=a,OU=ops"):
        mapper.name("CN=a,OU=ops")
    with pytest.raises(NoMatchingRule):
        tls_principal(_cert((("commonName", "a"),)), mapper)


@pytest.mark.parametrize(("rules", "message"), [
    ("DEFAULTS", "invalid rule 'DEFAULTS'"),
    ("RULE:abc", "expected RULE:pattern/replacement"),
    ("RULE:(/x/", "is not a regular expression"),
    ("DEFAULT,FOO", "invalid rule 'FOO'"),
    ("RULE:^CN=(.*)$/$2/", "replacement '\\$2': no group 2"),
    ("RULE:^CN=(.*)$/${who}/", "no group named 'who'"),
])
def test_bad_mapping_rules(rules: str, message: str) -> None:
    with pytest.raises(TlsConfigError, match=message):
        parse_mapping_rules(rules)
