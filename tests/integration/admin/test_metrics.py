"""The Prometheus endpoint and share-group operator logs against a real broker process.

Must-show: /metrics scraped during a ShareConsumer run shows acknowledgement counters > 0 and a
per-partition lag gauge that is > 0 while records are unacknowledged and falls to 0 once they are.
The module's broker runs with ``--metrics-listen`` and ``--log-format json`` so the structured
log lines (event, group, topic, partition, member) can be checked too.

The endpoint's bounds and security (issue 25), each on a broker of its own: a scrape storm
renders once per ``metrics.render.cache.ms`` (its default) while Kafka requests are answered
promptly; ``metrics.max.connections``; HTTPS with client certificates and basic auth from an
exporter-toolkit web config file (certificates made at test time with trustme).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import trustme
from confluent_kafka import AcknowledgeType
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from protocol import codec
from tests.conftest import ROOT, BrokerProcess, child_env, free_port
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient
from tests.integration.share_helpers import poll_until, produce, set_group_configs, share_consumer

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"')


class MetricsBroker(BrokerProcess):
    """A broker started with ``--metrics-listen`` and JSON logs (CLI flags, not overrides)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.metrics_port = free_port()

    def start(self, timeout: float = 20.0) -> None:
        cmd = [sys.executable, "-m", "broker.main", "broker", "--listen", self.bootstrap,
               "--data-dir", str(self.data_dir), "--log-format", "json",
               "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
               "--override", "group.share.min.record.lock.duration.ms=1000",
               "--override", "group.share.min.session.timeout.ms=1000",
               "--override", "group.share.min.heartbeat.interval.ms=200"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=child_env())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                # The metrics endpoint opens before the Kafka listener binds: wait for both.
                scrape(self)
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not start within {timeout}s:\n{self.logs()}")

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines that carry an ``event``."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                doc = json.loads(line)
                if "event" in doc:
                    out.append(doc)
        return out


class Scrape:
    """One /metrics page, parsed: samples by name, each a dict of labels and a value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        self.types: dict[str, str] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                self.types[name] = kind
                continue
            if line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            labels = dict(_LABEL.findall(m.group(2) or ""))
            self.samples.setdefault(m.group(1), []).append((labels, float(m.group(3))))

    def value(self, name: str, **labels: str) -> float | None:
        for got, v in self.samples.get(name, []):
            if all(got.get(k) == val for k, val in labels.items()):
                return v
        return None

    def total(self, name: str, **labels: str) -> float:
        return sum(v for got, v in self.samples.get(name, [])
                   if all(got.get(k) == val for k, val in labels.items()))


def scrape(b: MetricsBroker, path: str = "/metrics") -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}{path}", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return Scrape(r.read().decode())


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    b = MetricsBroker(Path(tmp_path_factory.mktemp("metrics-broker")) / "data")
    b.start()
    yield b
    b.stop()


def _setup(b: MetricsBroker, name: str, count: int, **configs: str) -> list[bytes]:
    create_topic(b.bootstrap, name, 1)
    set_group_configs(b.bootstrap, name, {"share.auto.offset.reset": "earliest", **configs})
    return produce(b.bootstrap, name, count)


def test_scrape_during_share_consumption_shows_acks_and_lag_falling_to_zero(mb, unique) -> None:
    values = _setup(mb, unique, 500)
    where = {"group": unique, "topic": unique, "partition": "0"}
    before = scrape(mb)
    assert before.value("shoal_produce_records_total", topic=unique) == 500
    assert before.value("shoal_produce_bytes_total", topic=unique) > 0
    assert before.value("shoal_share_partition_lag", **where) is None  # not loaded yet

    got: list[bytes] = []
    c = share_consumer(mb.bootstrap, unique, unique)  # implicit: acks go with the next poll
    try:
        poll_until([c], lambda: bool(got), on_message=lambda _i, m: got.append(m.value()))
        during = scrape(mb)  # the records just polled are acquired and not yet acknowledged
        assert during.value("shoal_share_partition_lag", **where) > 0
        assert during.value("shoal_share_partition_acquired_records", **where) > 0
        assert during.value("shoal_share_group_members", group=unique) == 1
        assert during.value("shoal_share_groups", state="Stable") >= 1
        assert during.value("shoal_share_sessions") >= 1
        assert during.value("shoal_share_partitions", group=unique) == 1
        poll_until([c], lambda: len(got) >= len(values),
                   on_message=lambda _i, m: got.append(m.value()))
        c.poll(0.5)  # acknowledges the last batch
    finally:
        c.close()
    assert sorted(got) == sorted(values)

    deadline = time.monotonic() + 10
    while True:
        after = scrape(mb)
        if after.value("shoal_share_partition_lag", **where) == 0:
            break
        assert time.monotonic() < deadline, after.value("shoal_share_partition_lag", **where)
        time.sleep(0.1)
    assert after.value("shoal_share_acknowledgements_total", **where, type="accept") == 500
    assert after.value("shoal_share_acknowledgements_total", **where, type="release") == 0
    assert after.value("shoal_share_group_lag", group=unique) == 0
    assert after.value("shoal_share_partition_start_offset", **where) == 500
    assert after.value("shoal_share_partition_in_flight_records", **where) == 0
    assert after.value("shoal_share_partition_oldest_acquired_age_seconds", **where) == 0
    assert after.value("shoal_share_fetch_bytes_total", topic=unique) > 0
    assert after.value("shoal_share_acquired_records_total", topic=unique) == 500
    assert after.value("shoal_share_fetch_requests_total") > 0
    # The fetches after the last record found nothing: they waited (MaxWaitMs) and came back
    # empty (counted as the answer goes out, so the last one may still be on its way).
    deadline = time.monotonic() + 10
    while (after.value("shoal_share_fetch_parked_total") < 1
           or after.value("shoal_share_fetch_empty_responses_total") < 1):
        assert time.monotonic() < deadline, "no parked or empty ShareFetch counted"
        time.sleep(0.1)
        after = scrape(mb)
    assert after.value("shoal_share_fetch_empty_responses_total") <= \
        after.value("shoal_share_fetch_requests_total")
    assert after.value("shoal_share_state_write_duration_seconds_count") > 0
    assert after.value("shoal_share_state_write_duration_seconds_bucket", le="+Inf") == \
        after.value("shoal_share_state_write_duration_seconds_count")
    assert after.types["shoal_share_acknowledgements_total"] == "counter"
    assert after.types["shoal_share_partition_lag"] == "gauge"
    assert after.types["shoal_share_state_write_duration_seconds"] == "histogram"


def test_delivery_limit_archives_show_in_metrics_and_logs(mb, unique) -> None:
    _setup(mb, unique, 5, **{"share.delivery.count.limit": "2"})
    where = {"group": unique, "topic": unique, "partition": "0"}
    c = share_consumer(mb.bootstrap, unique, unique, explicit=True)
    try:
        for _ in range(2):  # release every record twice: the second release archives it
            batch: list[Any] = []
            poll_until([c], lambda: len(batch) >= 5, on_message=lambda _i, m: batch.append(m))
            for m in batch:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync(15)
    finally:
        c.close()
    s = scrape(mb)
    assert s.value("shoal_share_delivery_limit_archived_records_total", **where) == 5
    assert s.value("shoal_share_acknowledgements_total", **where, type="release") == 10
    assert s.value("shoal_share_partition_lag", **where) == 0  # archived records are complete

    deadline = time.monotonic() + 10
    while True:  # the leave is logged when the member's heartbeat (epoch -1) is handled
        mine = [e for e in mb.events() if e.get("group") == unique]
        kinds = {e["event"] for e in mine}
        if "member_left" in kinds:
            break
        assert time.monotonic() < deadline, kinds
        time.sleep(0.1)
    assert {"member_joined", "share_partition_initialised",
            "records_archived_at_delivery_limit", "member_left"} <= kinds
    (archived,) = [e for e in mine if e["event"] == "records_archived_at_delivery_limit"]
    assert archived["topic"] == unique and archived["partition"] == 0
    assert archived["level"] == "WARNING" and "5 record(s)" in archived["msg"]
    (init,) = [e for e in mine if e["event"] == "share_partition_initialised"]
    assert init["topic"] == unique and init["partition"] == 0
    joined = [e for e in mine if e["event"] == "member_joined"]
    assert len(joined) == 1 and joined[0]["member"]


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    m = codec.request_module(3, 12)
    with RawClient(bootstrap) as c:
        resp = c.call(3, 12, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (t,) = resp.topics
    return t.topic_id


def test_lock_timeouts_unacked_age_and_member_expiry(mb, unique) -> None:
    """A member that acquires records and then goes silent: the oldest unacknowledged age
    grows, its locks time out (counter and log), and its session expires (log)."""
    _setup(mb, unique, 10, **{"share.record.lock.duration.ms": "1000",
                              "share.session.timeout.ms": "1500",
                              "share.heartbeat.interval.ms": "500"})
    where = {"group": unique, "topic": unique, "partition": "0"}
    tid = _topic_id(mb.bootstrap, unique)
    hb = codec.request_module(76, 1)
    sf = codec.request_module(78, 1)
    with RawClient(mb.bootstrap) as c:
        joined = c.call(76, 1, hb.ShareGroupHeartbeatRequest(
            group_id=unique, member_id="silent-member", member_epoch=0, rack_id=None,
            subscribed_topic_names=(unique,)))
        assert joined.error_code == ErrorCode.none
        fetched = c.call(78, 1, sf.ShareFetchRequest(
            group_id=unique, member_id="silent-member", share_session_epoch=0,
            max_wait=timedelta(milliseconds=2000), min_bytes=1, max_bytes=1 << 20,
            max_records=100, batch_size=100, forgotten_topics_data=(),
            topics=(sf.FetchTopic(topic_id=tid, partitions=(
                sf.FetchPartition(partition_index=0, acknowledgement_batches=()),)),)))
        acquired = [a for t in fetched.responses for p in t.partitions
                    for a in p.acquired_records]
        assert sum(a.last_offset - a.first_offset + 1 for a in acquired) == 10
        time.sleep(0.2)  # let the acquisition age
        held = scrape(mb)
        assert held.value("shoal_share_partition_acquired_records", **where) == 10
        assert held.value("shoal_share_partition_oldest_acquired_age_seconds", **where) >= 0.1
        assert held.value("shoal_share_group_oldest_acquired_age_seconds", group=unique) >= 0.1
        assert held.value("shoal_share_partition_lag", **where) == 10

        deadline = time.monotonic() + 10
        while True:  # the locks (1 s) and then the member's session (1.5 s) run out
            s = scrape(mb)
            kinds = {e["event"] for e in mb.events() if e.get("group") == unique}
            if s.value("shoal_share_acquisition_lock_timeouts_total", **where) == 10 \
                    and "member_expired" in kinds:
                break
            assert time.monotonic() < deadline, (kinds, s.value(
                "shoal_share_acquisition_lock_timeouts_total", **where))
            time.sleep(0.1)
    assert s.value("shoal_share_partition_acquired_records", **where) == 0
    assert s.value("shoal_share_partition_oldest_acquired_age_seconds", **where) == 0
    assert s.value("shoal_share_partition_lag", **where) == 10  # released, not consumed
    assert {"member_joined", "acquisition_lock_timeout", "member_expired"} <= kinds
    expired = [e for e in mb.events() if e.get("event") == "member_expired"
               and e.get("group") == unique]
    assert expired[0]["member"] == "silent-member" and expired[0]["level"] == "WARNING"


def _share_fetch_without_session(bootstrap: str, group: str, topic_id: uuid.UUID) -> Any:
    m = codec.request_module(78, 1)
    body = m.ShareFetchRequest(
        group_id=group, member_id="no-such-member", share_session_epoch=3,
        max_wait=timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20, max_records=10,
        batch_size=10, topics=(m.FetchTopic(topic_id=topic_id, partitions=(
            m.FetchPartition(partition_index=0, acknowledgement_batches=()),)),),
        forgotten_topics_data=())
    with RawClient(bootstrap) as c:
        return c.call(78, 1, body)


def _share_ack_without_session(bootstrap: str, group: str) -> Any:
    m = codec.request_module(79, 1)
    body = m.ShareAcknowledgeRequest(group_id=group, member_id="no-such-member",
                                     share_session_epoch=0, topics=())
    with RawClient(bootstrap) as c:
        return c.call(79, 1, body)


def test_failed_share_requests_are_counted_by_error(mb, unique) -> None:
    before = scrape(mb)
    resp = _share_fetch_without_session(mb.bootstrap, unique, uuid.uuid4())
    assert resp.error_code == ErrorCode.share_session_not_found
    resp = _share_ack_without_session(mb.bootstrap, unique)
    assert resp.error_code == ErrorCode.invalid_share_session_epoch
    after = scrape(mb)
    key = "shoal_share_fetch_requests_failed_total"
    assert after.total(key, error="SHARE_SESSION_NOT_FOUND") == \
        before.total(key, error="SHARE_SESSION_NOT_FOUND") + 1
    key = "shoal_share_acknowledge_requests_failed_total"
    assert after.total(key, error="INVALID_SHARE_SESSION_EPOCH") == \
        before.total(key, error="INVALID_SHARE_SESSION_EPOCH") + 1
    assert after.value("shoal_share_acknowledge_requests_total") == \
        before.value("shoal_share_acknowledge_requests_total") + 1


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/", 404), ("GET", "/metrics/extra", 404), ("GET", "/favicon.ico", 404),
    ("POST", "/metrics", 405),
])
def test_other_paths_and_methods_are_refused(mb, method: str, path: str, status: int) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{mb.metrics_port}{path}", method=method,
                                 data=b"" if method == "POST" else None)
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == status
    exc.value.close()


def test_metrics_are_off_by_default(broker) -> None:
    assert BrokerConfig().get("metrics.listen") == ""
    assert "Prometheus metrics at" not in broker.logs()


# -- bounds and security of the endpoint (issue 25) ---------------------------------------------

def _metrics_broker(tmp_path: Path, **overrides: str) -> tuple[BrokerProcess, int]:
    port = free_port()
    b = BrokerProcess(tmp_path / "data", {"metrics.listen": f"127.0.0.1:{port}", **overrides})
    b.start()
    return b, port


def test_a_scrape_storm_renders_once_per_interval_and_kafka_stays_responsive(
        tmp_path: Path) -> None:
    """16 scrapers in a loop for 3 s against the default metrics.render.cache.ms (1 s): the page
    is rendered about once a second, not once per scrape, and ApiVersions on a Kafka connection
    keeps being answered promptly the whole time."""
    default_cache_ms = BrokerConfig().get("metrics.render.cache.ms")
    assert default_cache_ms == 1000
    b, port = _metrics_broker(tmp_path, **{"metrics.render.cache.ms": str(default_cache_ms),
                                           "metrics.max.connections": "64"})
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        stop = time.monotonic() + 3.0
        scrapes = [0] * 16

        def scraper(i: int) -> None:
            while time.monotonic() < stop:
                with urllib.request.urlopen(url, timeout=10) as r:
                    assert r.status == 200 and b"shoal_connections" in r.read()
                scrapes[i] += 1

        slowest = 0.0
        with ThreadPoolExecutor(16) as pool, RawClient(b.bootstrap) as c:
            started = time.monotonic()
            futures = [pool.submit(scraper, i) for i in range(16)]
            while time.monotonic() < stop:
                t0 = time.monotonic()
                body = codec.request_module(18, 3).ApiVersionsRequest(
                    client_software_name="t", client_software_version="1")
                assert c.call(18, 3, body).error_code == ErrorCode.none
                slowest = max(slowest, time.monotonic() - t0)
            for f in futures:
                f.result()
            elapsed = time.monotonic() - started
        time.sleep(1.1)  # the next scrape renders a fresh page
        renders = scrape_url(url).value("shoal_metrics_render_duration_seconds_count")
        assert sum(scrapes) >= 100, scrapes
        # One render per started second of the storm, plus the one just above.
        assert renders is not None and renders <= elapsed + 3, (renders, sum(scrapes))
        assert slowest < 1.0, slowest
    finally:
        b.stop()


def scrape_url(url: str, context: ssl.SSLContext | None = None,
               headers: dict[str, str] | None = None) -> Scrape:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10, context=context) as r:
        assert r.status == 200
        return Scrape(r.read().decode())


def test_the_connection_cap_closes_one_more_and_frees_a_slot(tmp_path: Path) -> None:
    b, port = _metrics_broker(tmp_path, **{"metrics.max.connections": "3"})
    url = f"http://127.0.0.1:{port}/metrics"
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
    try:
        # Accepted in order: the three idle ones hold every slot.
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(url, timeout=5)
        assert exc.value.code == 503
        assert b"metrics.max.connections" in exc.value.read()
        exc.value.close()
        idle.pop().close()
        deadline = time.monotonic() + 10
        while (page := _scrape_or_none(url)) is None:  # until the broker saw the close
            assert time.monotonic() < deadline, "the freed slot was never reused"
            time.sleep(0.05)
        assert (page.value("shoal_metrics_connections_rejected_total") or 0) >= 1
        # Kafka clients are not affected by the metrics cap.
        with RawClient(b.bootstrap) as c:
            assert c.call(18, 3, codec.request_module(18, 3).ApiVersionsRequest(
                client_software_name="t", client_software_version="1")).error_code == 0
    finally:
        for s in idle:
            s.close()
        b.stop()


def _scrape_or_none(url: str) -> Scrape | None:
    try:
        return scrape_url(url)
    except urllib.error.HTTPError as exc:
        exc.close()
        return None


def _auth(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_https_with_client_certificates_and_basic_auth(tmp_path: Path) -> None:
    """An exporter-toolkit web config file: TLS with a required client certificate, and a
    bcrypt-hashed user. Without credentials or with a wrong password: 401 asking for Basic;
    without a client certificate or over plain HTTP: no page at all."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("prometheus@example.com")
    certs = tmp_path / "certs"
    certs.mkdir()
    server.cert_chain_pems[0].write_to_path(str(certs / "server.crt"))
    server.private_key_pem.write_to_path(str(certs / "server.key"))
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    hashed = bcrypt.hashpw(b"scrape-secret", bcrypt.gensalt(4)).decode()
    web = certs / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        "  cert_file: server.crt\n"  # relative to the file, as exporter-toolkit reads it
        "  key_file: server.key\n"
        "  client_ca_file: ca.pem\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "basic_auth_users:\n"
        f"  prometheus: '{hashed}'\n")
    b, port = _metrics_broker(tmp_path, **{"metrics.web.config.file": str(web)})
    url = f"https://127.0.0.1:{port}/metrics"
    with_cert = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    client.configure_cert(with_cert)
    without_cert = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    try:
        page = scrape_url(url, with_cert, _auth("prometheus", "scrape-secret"))
        assert page.value("shoal_connections") is not None
        # Remembered: the next scrape skips bcrypt and is answered the same.
        assert scrape_url(url, with_cert, _auth("prometheus", "scrape-secret")).samples
        for headers in ({}, _auth("prometheus", "wrong"), _auth("nobody", "scrape-secret"),
                        {"Authorization": "Bearer abc"}):
            with pytest.raises(urllib.error.HTTPError) as exc:
                scrape_url(url, with_cert, headers)
            assert exc.value.code == 401
            assert exc.value.headers["WWW-Authenticate"].startswith("Basic")
            exc.value.close()
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            scrape_url(url, without_cert, _auth("prometheus", "scrape-secret"))
        with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
            scrape_url(f"http://127.0.0.1:{port}/metrics", None,
                       _auth("prometheus", "scrape-secret"))
        assert "scrape-secret" not in b.logs()
        assert f"Prometheus metrics at https://127.0.0.1:{port}/metrics (basic auth)" in b.logs()
    finally:
        b.stop()


def test_an_unusable_web_config_file_stops_the_broker(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prometheus: plain-password\n")
    proc = subprocess.run(
        [sys.executable, "-m", "broker.main", "broker", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--override",
         f"metrics.web.config.file={web}"], cwd=ROOT, capture_output=True, text=True,
        timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "shoal: configuration error: metrics.web.config.file" in proc.stderr
    assert "must be a bcrypt hash" in proc.stderr
    assert "plain-password" not in proc.stderr
