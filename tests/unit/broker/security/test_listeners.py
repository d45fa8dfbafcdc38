"""Listener configs: parsing ``listeners``/``advertised.listeners``/the protocol map, per-listener
config lookup, and the broker config accepting Kafka's security names (issue 13)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.main import build_config
from broker.security.listeners import (
    Listener,
    ListenerError,
    SecurityProtocol,
    jaas_config,
    listener_config,
    parse_endpoint,
    parse_listeners,
    parse_protocol_map,
)

P = SecurityProtocol
# A copy of shared/reference/secure-server.properties (issue 13: Shoal starts from it unchanged).
REFERENCE = Path(__file__).parents[3] / "secure-server.properties"

ENDPOINTS = [
    ("PLAINTEXT://127.0.0.1:9092", ("PLAINTEXT", "127.0.0.1", 9092)),
    ("sasl_ssl://broker.example:9093", ("SASL_SSL", "broker.example", 9093)),
    ("SSL://[::1]:9094", ("SSL", "::1", 9094)),
    ("INTERNAL://:9095", ("INTERNAL", "", 9095)),
    ("127.0.0.1:0", (None, "127.0.0.1", 0)),
    (" CLIENT-1://[fe80::1%eth0]:1 ", ("CLIENT-1", "fe80::1%eth0", 1)),
]


@pytest.mark.parametrize(("value", "expected"), ENDPOINTS, ids=[v for v, _ in ENDPOINTS])
def test_parse_endpoint(value: str, expected: tuple[str | None, str, int]) -> None:
    assert parse_endpoint(value) == expected


BAD_ENDPOINTS = [
    ("PLAINTEXT://127.0.0.1", "is not NAME://host:port"),
    ("PLAINTEXT://host:99999", "out of range"),
    ("PLAINTEXT://host:x", "is not a number"),
    ("PLAIN TEXT://host:1", "invalid listener name"),
    ("SSL://::1:9093", "in brackets"),
]


@pytest.mark.parametrize(("value", "message"), BAD_ENDPOINTS, ids=[v for v, _ in BAD_ENDPOINTS])
def test_bad_endpoint(value: str, message: str) -> None:
    with pytest.raises(ListenerError, match=message):
        parse_endpoint(value)


def test_protocol_map_default_and_custom() -> None:
    assert parse_protocol_map(None) == {p.value: p for p in SecurityProtocol}
    assert parse_protocol_map("internal:sasl_plaintext, EXTERNAL:SSL") == {
        "INTERNAL": P.SASL_PLAINTEXT, "EXTERNAL": P.SSL}
    with pytest.raises(ListenerError, match="unknown security protocol 'TLS'"):
        parse_protocol_map("A:TLS")
    with pytest.raises(ListenerError, match="mapped twice"):
        parse_protocol_map("A:SSL,a:SSL")
    with pytest.raises(ListenerError, match="is not NAME:PROTOCOL"):
        parse_protocol_map("SSL")


def test_several_listeners_with_advertised_addresses() -> None:
    got = parse_listeners("SASL_SSL://127.0.0.1:9093,SSL://[::1]:9094,PLAINTEXT://:9092",
                          advertised="SASL_SSL://public.example:19093",
                          inter_broker_listener_name="ssl")
    assert got == [
        Listener("SASL_SSL", P.SASL_SSL, "127.0.0.1", 9093, "public.example", 19093),
        Listener("SSL", P.SSL, "::1", 9094, "::1", 9094),
        Listener("PLAINTEXT", P.PLAINTEXT, "", 9092, "", 9092),
    ]
    assert got[2].bind_host is None and got[0].bind_host == "127.0.0.1"
    assert got[0].config_prefix == "listener.name.sasl_ssl."
    assert got[0].security_protocol.uses_tls and got[0].security_protocol.uses_sasl
    assert not got[2].security_protocol.uses_tls


def test_custom_names_need_the_map() -> None:
    with pytest.raises(ListenerError, match="no security protocol for listener CLIENT"):
        parse_listeners("CLIENT://127.0.0.1:9092")
    got = parse_listeners("CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
                          "CLIENT:SASL_SSL,REPLICATION:PLAINTEXT")
    assert [(x.name, x.security_protocol) for x in got] == [
        ("CLIENT", P.SASL_SSL), ("REPLICATION", P.PLAINTEXT)]


def test_a_bare_host_port_is_plaintext() -> None:
    assert parse_listeners("127.0.0.1:0") == [
        Listener("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 0, "127.0.0.1", 0)]


BAD_LISTENERS = [
    ({"listeners": ""}, "at least one listener"),
    ({"listeners": "SSL://a:1,SSL://b:2"}, "different name"),
    ({"listeners": "SSL://a:1,PLAINTEXT://a:1"}, "different port"),
    ({"listeners": "SSL://a:1", "advertised": "PLAINTEXT://b:1"}, "not one of the listeners"),
    ({"listeners": "SSL://a:1", "advertised": "SSL://0.0.0.0:1"}, "unroutable"),
    ({"listeners": "SSL://a:1", "inter_broker_listener_name": "PLAINTEXT"},
     "inter.broker.listener.name: PLAINTEXT is not one of the listeners"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_LISTENERS, ids=[m for _, m in BAD_LISTENERS])
def test_bad_listeners(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ListenerError, match=message):
        parse_listeners(**kwargs)


def test_controller_listeners_are_left_out() -> None:
    got = parse_listeners("PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093",
                          "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT", exclude=["CONTROLLER"])
    assert [x.name for x in got] == ["PLAINTEXT"]


def test_listener_config_prefers_the_listener_prefix() -> None:
    config = {"ssl.client.auth": "none", "listener.name.ssl.ssl.client.auth": "required",
              "sasl.jaas.config": "GLOBAL",
              "listener.name.sasl_ssl.plain.sasl.jaas.config": "PLAIN-ON-SASL_SSL"}
    assert listener_config(config, "SSL", "ssl.client.auth") == "required"
    assert listener_config(config, "SASL_SSL", "ssl.client.auth") == "none"
    assert listener_config(config, "SASL_SSL", "ssl.missing", "dflt") == "dflt"
    assert jaas_config(config, "SASL_SSL", "PLAIN") == "PLAIN-ON-SASL_SSL"
    assert jaas_config(config, "SASL_SSL", "SCRAM-SHA-256") == "GLOBAL"
    assert jaas_config({}, "SASL_SSL", "PLAIN") is None


# --------------------------------------------------------------------------- broker config

def test_default_is_one_plaintext_listener_on_loopback() -> None:
    cfg = BrokerConfig()
    assert cfg.listen == ("127.0.0.1", 9092)
    assert cfg.listeners == [Listener("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 9092,
                                      "127.0.0.1", 9092)]


def test_listen_option_still_works(tmp_path: Path) -> None:
    args = argparse.Namespace(config=None, override=[], listen="127.0.0.1:0",
                              data_dir=str(tmp_path), metrics_listen=None)
    cfg = build_config(args)
    assert cfg.listen == ("127.0.0.1", 0)
    assert [x.security_protocol for x in cfg.listeners] == [P.PLAINTEXT]


def test_the_reference_secure_properties_parse(caplog: pytest.LogCaptureFixture) -> None:
    args = argparse.Namespace(config=str(REFERENCE), override=[], listen=None,
                              data_dir="/nonexistent-never-created", metrics_listen=None)
    with caplog.at_level(logging.WARNING, logger="shoal.config"):
        cfg = build_config(args)
    assert [(x.name, x.security_protocol, x.port) for x in cfg.listeners] == [
        ("SASL_SSL", P.SASL_SSL, 9093), ("SSL", P.SSL, 9094)]
    m = cfg.as_mapping()
    assert listener_config(m, "SSL", "ssl.client.auth") == "required"
    assert listener_config(m, "SASL_SSL", "ssl.client.auth") == "none"
    assert cfg.get("sasl.enabled.mechanisms") == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    assert 'user_admin="admin-secret"' in (jaas_config(m, "SASL_SSL", "PLAIN") or "")
    assert cfg.get("ssl.keystore.type") == "PEM"
    # Only the KRaft/replication names warn; no listener.name.* warning (both listeners exist).
    assert not [r for r in caplog.records if "listener.name" in r.getMessage()]


PER_LISTENER_BAD = [
    ({"listener.name.ssl.ssl.client.auth": "sometimes"}, "must be one of none"),
    ({"listener.name.ssl.ssl.clent.auth": "required"},
     "did you mean listener.name.ssl.ssl.client.auth"),
    ({"listener.name.SSL.ssl.client.auth": "required"}, "must be lower case"),
    ({"listener.name.ssl": "x"}, "expected listener.name.<listener>.<config>"),
    ({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-1"}, "unknown SASL mechanism"),
    ({"listener.name.ssl.ssl.principal.mapping.rules": "RULE:x"}, "invalid rule"),
    ({"ssl.enabled.protocols": "TLSv1.3,SSLv3"}, "SSLv3: Shoal serves TLSv1.2 and TLSv1.3"),
    ({"listeners": "A://:1"}, "no security protocol for listener A"),
    ({"inter.broker.listener.name": "SSL"}, "is not one of the listeners"),
]


@pytest.mark.parametrize(("values", "message"), PER_LISTENER_BAD,
                         ids=[m for _, m in PER_LISTENER_BAD])
def test_bad_security_configs_stop_the_broker(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(values)


def test_per_listener_values_are_typed_and_startup_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="shoal.config"):
        cfg = BrokerConfig({"listener.name.other.allow.everyone.if.no.acl.found": "true",
                            "listener.name.plaintext.scram-sha-512.sasl.jaas.config": "X"})
    m = cfg.as_mapping()
    assert m["listener.name.other.allow.everyone.if.no.acl.found"] is True
    assert m["listener.name.plaintext.scram-sha-512.sasl.jaas.config"] == "X"
    assert [r.getMessage() for r in caplog.records] == [
        "broker config listener.name.other.allow.everyone.if.no.acl.found is for listener "
        "OTHER, which is not in listeners"]
    with pytest.raises(ConfigError):
        cfg.set("listener.name.plaintext.ssl.client.auth", "required")
