"""The metrics endpoint's web config file (exporter-toolkit format), basic auth, connection cap
and page cache (broker/security/metrics_web.py, broker/metrics.py MetricsServer), over real
sockets on 127.0.0.1 with an injected clock. Certificates are made at test time (trustme)."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path

import bcrypt
import pytest
import trustme

from broker.clock import FakeClock
from broker.metrics import Counter, Histogram, MetricsServer
from broker.security.metrics_web import (
    BasicAuth,
    WebConfig,
    WebConfigError,
    load_web_config,
)

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return tmp_path


def _load(directory: Path, text: str) -> WebConfig:
    path = directory / "web.yml"
    path.write_text(text)
    return load_web_config(path)


def test_a_full_file_loads_with_paths_relative_to_it(certs: Path) -> None:
    web = _load(certs, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       "  client_ca_file: ca.pem\n  client_auth_type: VerifyClientCertIfGiven\n"
                       "  min_version: TLS13\n"
                       f"basic_auth_users:\n  prom: '{HASH}'\n")
    assert web.ssl is not None
    assert web.ssl.verify_mode == ssl.CERT_OPTIONAL
    assert web.ssl.minimum_version == ssl.TLSVersion.TLSv1_3
    assert web.users == {"prom": HASH.encode()}
    assert _load(certs, "") == WebConfig()


@pytest.mark.parametrize("text,problem", [
    ("http_server_config:\n  http2: false\n", "http_server_config not supported by Shoal"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "cipher_suites not supported"),
    ("tls_server_config:\n  cert_file: server.crt\n", "cert_file and key_file are both"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.pem\n",
     "client_auth_type 'RequireAnyClientCert' is not supported"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_ca_file: ca.pem\n", "client_ca_file is set without a client_auth_type"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
     "cert_file/key_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  min_version: SSL3\n", "min_version 'SSL3' must be one of"),
    ("basic_auth_users:\n  prom: hunter2\n", "must be a bcrypt hash"),
    ("basic_auth_users: [prom]\n", "expected a mapping of user name"),
    ("[1, 2]\n", "expected a mapping at the top level"),
    ("a: [\n", "metrics.web.config.file"),
], ids=["unknown-top", "unknown-tls", "no-key", "unverified-client", "ca-without-auth",
        "auth-without-ca", "missing-cert", "bad-version", "plain-password", "users-list",
        "not-a-mapping", "bad-yaml"])
def test_unusable_files_are_refused_naming_the_setting(certs: Path, text: str,
                                                       problem: str) -> None:
    with pytest.raises(WebConfigError) as exc:
        _load(certs, text)
    assert problem in str(exc.value)
    assert "hunter2" not in str(exc.value)


def test_basic_auth_credentials_check_and_memory() -> None:
    token = base64.b64encode(b"prom:p:w").decode()
    assert BasicAuth.credentials(f"Basic {token}") == ("prom", "p:w")
    for bad in (None, "", "Bearer x", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode()):
        assert BasicAuth.credentials(bad) is None
    auth = BasicAuth({"prom": HASH.encode(), "broken": b"$2b$not-a-hash"})
    assert auth.check("prom", "pw")
    assert not auth.check("prom", "wrong")
    assert not auth.check("nobody", "pw")
    assert not auth.check("broken", "pw")
    assert not auth.remembered("prom", "pw")
    auth.remember("prom", "pw")
    assert auth.remembered("prom", "pw") and not auth.remembered("prom", "other")


async def _get(port: int, headers: str = "", tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    writer.write(f"GET /metrics HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def test_the_page_is_rendered_once_per_cache_interval() -> None:
    renders: list[int] = []
    clock = FakeClock()
    seconds = Histogram("render_seconds", "")

    def render() -> str:
        renders.append(clock.monotonic_ms())
        return f"x_renders {len(renders)}\n"

    server = MetricsServer(render, cache_ms=1000, now_ms=clock.monotonic_ms,
                           render_seconds=seconds)
    await server.start("127.0.0.1", 0)
    try:
        assert (await _get(server.port)).endswith(b"x_renders 1\n")
        clock.advance(999)
        assert (await _get(server.port)).endswith(b"x_renders 1\n")
        clock.advance(1)
        assert (await _get(server.port)).endswith(b"x_renders 2\n")
        assert seconds.count == 2
    finally:
        await server.stop()


async def test_one_connection_over_the_cap_is_closed_with_503() -> None:
    rejected = Counter("rejected_total", "")
    server = MetricsServer(lambda: "x 1\n", max_connections=2, rejected=rejected)
    await server.start("127.0.0.1", 0)
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    try:
        refused = await _get(server.port)
        assert refused.startswith(b"HTTP/1.1 503 ")
        assert rejected.value == 1
        idle.pop()[1].close()
        for _ in range(100):  # until the server has seen the close
            answer = await _get(server.port)
            if answer.startswith(b"HTTP/1.1 200 "):
                break
            await asyncio.sleep(0.01)
        assert answer.endswith(b"x 1\n")
    finally:
        for _reader, writer in idle:
            writer.close()
        await server.stop()


async def test_basic_auth_over_tls(certs: Path) -> None:
    web = _load(certs, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       f"basic_auth_users:\n  prom: '{HASH}'\n")
    server = MetricsServer(lambda: "x 1\n", web=web)
    await server.start("127.0.0.1", 0)
    tls = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    good = "Authorization: Basic " + base64.b64encode(b"prom:pw").decode() + "\r\n"
    bad = "Authorization: Basic " + base64.b64encode(b"prom:nope").decode() + "\r\n"
    try:
        assert server.scheme == "https"
        for headers in ("", bad):
            got = await _get(server.port, headers, tls)
            assert got.startswith(b"HTTP/1.1 401 ")
            assert b'WWW-Authenticate: Basic realm="shoal metrics"' in got
        assert (await _get(server.port, good, tls)).endswith(b"x 1\n")
        assert server.auth is not None and server.auth.remembered("prom", "pw")
        assert (await _get(server.port, good, tls)).endswith(b"x 1\n")
    finally:
        await server.stop()
