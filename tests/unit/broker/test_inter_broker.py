"""broker/inter_broker.py: the listener and client security a broker calls other brokers with,
from Kafka's configs, and the errors that name the config to fix."""

from __future__ import annotations

from types import SimpleNamespace
import pytest

from broker.config import BrokerConfig
from broker.inter_broker import (
    InterBrokerConfigError,
    inter_broker_listener,
    inter_broker_security,
    network_persister_for,
)
from cluster.metadata import LocalMetadata
from persister.network_persister import NetworkPersister

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="broker" password="s3cret" user_broker="s3cret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="ibp" password="pw";')
TWO = "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093"


def test_plaintext_by_default() -> None:
    config = BrokerConfig({})
    assert inter_broker_listener(config).name == "PLAINTEXT"
    assert inter_broker_security(config).protocol == "PLAINTEXT"


def test_the_named_listener_with_its_mechanism_and_jaas_login() -> None:
    s = inter_broker_security(BrokerConfig({
        "listeners": TWO, "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}))
    assert (s.protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password) == (
        "SASL_PLAINTEXT", "PLAIN", "broker", "s3cret")
    assert "s3cret" not in repr(s)


def test_security_inter_broker_protocol_picks_the_listener_of_that_name() -> None:
    s = inter_broker_security(BrokerConfig({
        "listeners": TWO, "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "sasl.jaas.config": SCRAM_JAAS}))  # the un-prefixed JAAS config is the fallback
    assert (s.protocol, s.sasl_mechanism, s.sasl_username) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-256", "ibp")


@pytest.mark.parametrize("configs,fix", [
    ({"listeners": TWO, "inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "set only one of"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"}, "set inter.broker.listener.name"),
    ({"listeners": TWO, "inter.broker.listener.name": "SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "PLAIN"}, "sasl.mechanism.inter.broker.protocol=GSSAPI"),
    ({"listeners": TWO, "inter.broker.listener.name": "SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listeners": TWO, "inter.broker.listener.name": "SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config":
          'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'},
     "no username/password"),
    ({"listeners": TWO, "inter.broker.listener.name": "SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS},
     "must be one of the sasl.enabled.mechanisms"),
    ({"listeners": "SSL://127.0.0.1:9094", "inter.broker.listener.name": "SSL",
      "ssl.truststore.location": "/ca.jks"}, "ssl.truststore.type must be PEM"),
], ids=["both-names", "no-such-listener", "gssapi", "no-jaas", "jaas-without-login",
        "mechanism-not-enabled", "jks"])
def test_unusable_settings_name_the_config_to_fix(configs: dict[str, str], fix: str) -> None:
    with pytest.raises(InterBrokerConfigError) as info:
        inter_broker_security(BrokerConfig(configs))
    assert fix in str(info.value)


def test_tls_uses_the_listeners_pem_stores_and_host_name_check() -> None:
    s = inter_broker_security(BrokerConfig({
        "listeners": "SSL://127.0.0.1:9094", "inter.broker.listener.name": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/certs/ca.pem",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": "/certs/broker.pem",
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": ""}))
    assert (s.protocol, s.ssl_ca_location, s.ssl_certificate_location, s.ssl_key_location,
            s.ssl_key_password, s.check_hostname) == (
        "SSL", "/certs/ca.pem", "/certs/broker.pem", None, "kp", False)


async def test_network_persister_for_a_broker() -> None:
    config = BrokerConfig({"listeners": TWO, "inter.broker.listener.name": "PLAINTEXT",
                           "request.timeout.ms": "4000",
                           "share.coordinator.state.topic.num.partitions": "7"})
    cluster = LocalMetadata(1, {"PLAINTEXT": ("127.0.0.1", 9092)}, lambda t: 7)
    p = network_persister_for(SimpleNamespace(config=config, cluster=cluster))  # type: ignore[arg-type]
    try:
        assert isinstance(p, NetworkPersister) and p.listener == "PLAINTEXT"
        assert p._core.deadline_ms == 4000 and p._core.request_timeout_ms == 4000
    finally:
        await p.close()
