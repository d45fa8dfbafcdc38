"""Options and row layout of the Spark source and writer (no Spark session needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the pipeline package needs the 'spark' extra")

from client import ShareRecord  # noqa: E402
from pipeline.options import OptionError, SourceOptions, WriterOptions  # noqa: E402
from pipeline.rows import Columns, headers_of, to_arrow  # noqa: E402

BASE = {"kafka.bootstrap.servers": "h:9092", "group.id": "g", "subscribe": "a, b,a"}


def test_source_options_defaults_and_names() -> None:
    o = SourceOptions.parse(BASE)
    assert o.topics == ("a", "b")
    assert (o.max_records_per_batch, o.acknowledge, o.fail_on_data_loss, o.renew_locks) == (
        10_000, True, True, True)
    o = SourceOptions.parse({**BASE, "MAXRECORDSPERBATCH": "7", "acknowledge": "false",
                             "failOnDataLoss": "False", "kafka.group.id": "ignored"})
    assert (o.max_records_per_batch, o.acknowledge, o.fail_on_data_loss, o.group_id) == (
        7, False, False, "g")


@pytest.mark.parametrize(("options", "message"), [
    ({"group.id": "g", "subscribe": "t"}, "'kafka.bootstrap.servers' is required"),
    ({"kafka.bootstrap.servers": "h", "subscribe": "t"}, "'group.id' is required"),
    ({**BASE, "subscribe": " , "}, "names no topic"),
    ({**BASE, "subscribePattern": "t.*"}, "only 'subscribe' is supported"),
    ({**BASE, "maxRecordsPerBatch": "0"}, "'maxRecordsPerBatch' must be between 1 and"),
    ({**BASE, "maxRecordsPerBatch": "lots"}, "must be an integer, not 'lots'"),
    ({**BASE, "acknowledge": "maybe"}, "'acknowledge' must be true or false"),
])
def test_bad_source_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(options)


def test_writer_options_pass_kafka_settings_to_the_producer() -> None:
    o = WriterOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t",
                             "kafka.linger.ms": "20", "kafka.compression.type": "zstd"})
    assert o.topic == "t"
    assert dict(o.producer_config) == {"linger.ms": "20", "compression.type": "zstd"}


SECURE = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
          "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                    'required username="alice" password="alice-secret";',
          "kafka.ssl.ca.location": "/certs/ca.pem"}


def test_source_takes_kafka_security_options_like_sparks_kafka_source() -> None:
    o = SourceOptions.parse({**BASE, **SECURE, "Kafka.SSL.Endpoint.Identification.Algorithm":
                             "none", "kafka.client.id": "c"})
    assert dict(o.security) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SECURE["kafka.sasl.jaas.config"], "ssl.ca.location": "/certs/ca.pem",
        "ssl.endpoint.identification.algorithm": "none"}
    assert "alice-secret" not in repr(o)
    # What the consumer will use (client/security.py reads the same dict).
    from client.security import SecuritySettings

    s = SecuritySettings.from_options(dict(o.security))
    assert (s.protocol, s.sasl_username, s.check_hostname) == ("SASL_SSL", "alice", False)
    assert SourceOptions.parse(BASE).security == ()


@pytest.mark.parametrize(("options", "message"), [
    ({"kafka.security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"},
     "'OAUTHBEARER' is not supported"),
    ({"kafka.ssl.keystore.type": "JKS"}, "reads PEM files only"),
])
def test_bad_source_security_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse({**BASE, **options, "kafka.sasl.password": "hunter2"})


def test_writer_translates_java_security_names_for_librdkafka() -> None:
    o = WriterOptions.parse({"kafka.bootstrap.servers": "h:1", **SECURE,
                             "kafka.ssl.truststore.location": "/certs/other.pem"})
    assert dict(o.producer_config) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "alice-secret",
        "ssl.ca.location": "/certs/ca.pem"}
    assert "alice-secret" not in repr(o)


def _rec(topic: str, p: int, off: int) -> ShareRecord:
    return ShareRecord(topic, p, off, 1_700_000_000_123, 0, b"k", b"v", [("h", b"x")], 2)


def test_arrow_batch_has_the_kafka_source_columns() -> None:
    cols = Columns()
    cols.extend([_rec("t", 0, 5)])
    batch = to_arrow(cols)
    row = batch.to_pylist()[0]
    assert row["offset"] == 5 and row["deliveryCount"] == 2 and row["topic"] == "t"
    assert row["headers"] == [{"key": "h", "value": b"x"}]
    assert row["timestamp"].timestamp() == pytest.approx(1_700_000_000.123)


def test_headers_of_accepts_pairs_and_structs() -> None:
    assert headers_of(None) == []
    assert headers_of([("a", b"1"), {"key": "b", "value": None}]) == [("a", b"1"), ("b", None)]
    with pytest.raises(ValueError, match="needs a key"):
        headers_of([{"key": None, "value": b"x"}])


def test_batch_server_serves_published_streams_until_retracted() -> None:
    from pipeline.transport import BatchServer, fetch

    server = BatchServer("127.0.0.1")
    try:
        token = server.publish([[b"first ", b"piece, ", b"second piece"]])
        assert fetch(server.host, server.port, token, 0) == b"first piece, second piece"
        with pytest.raises(RuntimeError, match="no longer has this micro-batch"):
            fetch(server.host, server.port, token, 1)
        server.retract(token)
        with pytest.raises(RuntimeError, match="no longer has this micro-batch"):
            fetch(server.host, server.port, token, 0)
        port = server.port
    finally:
        server.close()
    with pytest.raises(RuntimeError, match="set the source option driverHost"):
        fetch("127.0.0.1", port, token, 0, timeout=2)


def test_transport_option_is_checked() -> None:
    assert SourceOptions.parse({**BASE, "transport": "TCP"}).transport == "tcp"
    with pytest.raises(OptionError, match="'transport' must be one of inline, tcp"):
        SourceOptions.parse({**BASE, "transport": "carrier-pigeon"})
