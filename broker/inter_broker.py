"""How a broker calls other brokers: the inter-broker listener, its client security, the persister.

Kafka's rules (``KafkaConfig.interBrokerListenerName`` / ``interBrokerSecurityProtocol``):

- ``inter.broker.listener.name`` names the listener brokers call each other on; without it,
  ``security.inter.broker.protocol`` (default PLAINTEXT) does, as the listener of that name.
  Setting both is an error. The listener must be one of ``listeners`` (every broker of a
  cluster is expected to have it; its endpoint comes from the cluster metadata).
- Its security protocol (``listener.security.protocol.map``) is the client's
  ``security.protocol``.
- SASL: the mechanism is ``sasl.mechanism.inter.broker.protocol`` (one of the listener's
  ``sasl.enabled.mechanisms``) and the login is the
  ``username``/``password`` options of the listener's JAAS config for that mechanism
  (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``), as Kafka
  logs its inter-broker connections in. For SCRAM that user needs a credential (``--add-scram``),
  and in every case it must be in ``super.users``: the share-state RPCs are CLUSTER_ACTION.
- TLS: the listener's ``ssl.truststore.location`` / ``ssl.truststore.certificates`` are the CAs
  the peer's certificate must chain to, its ``ssl.keystore.location`` (PEM key and chain) with
  ``ssl.key.password`` the certificate presented when the peer asks for one, and
  ``ssl.endpoint.identification.algorithm`` (https, or empty for none) checks the peer's host
  name.

``network_persister_for(broker)`` builds the ``NetworkPersister`` a cluster member uses (the
broker wires it; nothing here runs on import).

Errors are ``InterBrokerConfigError`` naming the config to fix; passwords are never quoted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.config import BrokerConfig
from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.listeners import Listener, jaas_config, listener_config
from broker.inter_broker_rpc import InterBrokerRpc
from client.pool import ConnectionPool
from client.security import MECHANISMS, SecurityConfigError, SecuritySettings
from persister.api import SharePartitionKey
from persister.coordinator_persister import CoordinatorPersister
from persister.local_first import LocalFirstPersister
from persister.network_persister import NetworkPersister
from cluster.metadata import PartitionInfo
from coordinator.share.opener import SHARE_STATE_TOPIC
from coordinator.share.service import partition_for_key

if TYPE_CHECKING:
    from broker.app import Broker

__all__ = ["InterBrokerConfigError", "inter_broker_listener", "inter_broker_rpc_for",
           "inter_broker_security", "network_persister_for"]


class InterBrokerConfigError(ValueError):
    """The broker configs do not say how to reach other brokers; the message names the fix."""


def inter_broker_listener(config: BrokerConfig) -> Listener:
    """The listener brokers call each other on (see the module doc).

    Raises:
        InterBrokerConfigError: both names set, or the named listener is not a listener.
    """
    name = (config.get("inter.broker.listener.name") or "").strip().upper()
    if name and not config.is_default("security.inter.broker.protocol"):
        raise InterBrokerConfigError(
            "set only one of inter.broker.listener.name and security.inter.broker.protocol")
    if not name:
        name = str(config.get("security.inter.broker.protocol")).upper()
    listeners = config.listeners
    for listener in listeners:
        if listener.name == name:
            return listener
    raise InterBrokerConfigError(
        f"the inter-broker listener {name} is not one of the listeners "
        f"({', '.join(x.name for x in listeners)}); set inter.broker.listener.name to one of "
        "them")


def inter_broker_security(config: BrokerConfig,
                          listener: Listener | None = None) -> SecuritySettings:
    """The client security settings for calls to other brokers (see the module doc).

    Raises:
        InterBrokerConfigError: no usable SASL mechanism or login, or TLS settings the client
            cannot use (a JKS/PKCS12 store, an inline key).
    """
    listener = listener or inter_broker_listener(config)
    values = config.as_mapping()
    protocol = listener.security_protocol
    settings: dict[str, Any] = {"protocol": protocol.value}
    if protocol.uses_sasl:
        settings.update(_sasl_login(values, listener))
    if protocol.uses_tls:
        settings.update(_tls_client(values, listener))
    try:
        out = SecuritySettings(**settings)
        out.validate()
    except SecurityConfigError as e:
        raise InterBrokerConfigError(f"inter-broker listener {listener.name}: {e}") from None
    return out


def _sasl_login(values: dict[str, Any], listener: Listener) -> dict[str, Any]:
    mechanism = str(values.get("sasl.mechanism.inter.broker.protocol") or "").upper()
    if mechanism not in MECHANISMS:
        raise InterBrokerConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism or '(empty)'} cannot be used on "
            f"the inter-broker listener {listener.name}; set it to one of "
            f"{', '.join(MECHANISMS)}")
    enabled = str(listener_config(values, listener.name, "sasl.enabled.mechanisms") or "")
    if mechanism not in {m.strip().upper() for m in enabled.split(",")}:
        raise InterBrokerConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} must be one of the "
            f"sasl.enabled.mechanisms of the inter-broker listener {listener.name} "
            f"({enabled or 'none'}), as Kafka requires")
    text = jaas_config(values, listener.name, mechanism)
    where = f"{listener.config_prefix}{mechanism.lower()}.sasl.jaas.config"
    if text is None:
        raise InterBrokerConfigError(
            f"no JAAS config for {mechanism} on the inter-broker listener {listener.name}: set "
            f"{where} with username=\"...\" password=\"...\" (the broker's own login)")
    try:
        entry = parse_jaas_config(text, where)
    except JaasError as e:
        raise InterBrokerConfigError(str(e)) from None
    username, password = entry.options.get("username"), entry.options.get("password")
    if not username or password is None:
        raise InterBrokerConfigError(
            f"{where} has no username/password options: brokers log in to each other with "
            "them (add username=\"...\" password=\"...\", a user in super.users)")
    return {"sasl_mechanism": mechanism, "sasl_username": username, "sasl_password": password}


def _tls_client(values: dict[str, Any], listener: Listener) -> dict[str, Any]:
    def get(key: str) -> Any:
        return listener_config(values, listener.name, key)

    out: dict[str, Any] = {}
    for kind in ("truststore", "keystore"):
        given = get(f"ssl.{kind}.location") or (kind == "truststore"
                                                 and get("ssl.truststore.certificates"))
        if given and str(get(f"ssl.{kind}.type") or "PEM").upper() != "PEM":
            raise InterBrokerConfigError(
                f"{listener.config_prefix}ssl.{kind}.type must be PEM for brokers to call each "
                "other over TLS (convert the store to PEM)")
    out["ssl_ca_location"] = get("ssl.truststore.location")
    out["ssl_ca_pem"] = get("ssl.truststore.certificates")
    keystore = get("ssl.keystore.location")
    if keystore:
        out["ssl_certificate_location"] = keystore
        out["ssl_key_password"] = get("ssl.key.password")
    elif get("ssl.keystore.key") and str(get("ssl.client.auth") or "none") == "required":
        raise InterBrokerConfigError(
            f"the inter-broker listener {listener.name} requires client certificates but its "
            "key store is inline (ssl.keystore.key); give it as ssl.keystore.location (a PEM "
            "file) so brokers can present it to each other")
    algorithm = str(get("ssl.endpoint.identification.algorithm") or "").strip().lower()
    out["check_hostname"] = algorithm == "https"
    return out


def network_persister_for(broker: Broker) -> NetworkPersister:
    """The persister of a cluster member: share state with the share coordinator on whichever
    broker leads the key's ``__share_group_state`` partition, over the inter-broker listener.

    Reads ``broker.cluster`` (``ClusterMetadata``) and these configs: the inter-broker listener
    and security (module doc), ``request.timeout.ms`` (a call's deadline and a request's bound),
    ``socket.connection.setup.timeout.ms`` (connect bound) and
    ``share.coordinator.state.topic.num.partitions``. The caller owns it: ``await
    persister.close()`` on shutdown (also closes its connections).

    Raises:
        InterBrokerConfigError: see ``inter_broker_listener`` / ``inter_broker_security``.
    """
    listener, pool, timeout_ms = _pool(broker.config)
    return NetworkPersister(
        _StateTopicOnFirstUse(broker), pool, listener=listener.name,
        num_partitions=lambda: int(broker.config.get("share.coordinator.state.topic.num.partitions")),
        deadline_ms=timeout_ms, request_timeout_ms=timeout_ms)


def local_first_persister_for(broker: Broker) -> LocalFirstPersister:
    """``network_persister_for``, with the keys whose share-state partition this broker leads
    served by its own share coordinator in process (``persister/local_first.py``).

    Raises:
        InterBrokerConfigError: as ``network_persister_for``.
    """
    remote = network_persister_for(broker)
    partitions: dict[SharePartitionKey, int] = {}  # the Java string hash of a key, once

    def is_local(key: SharePartitionKey) -> bool:
        p = partitions.get(key)
        if p is None:
            if len(partitions) > 100_000:
                partitions.clear()
            n = int(broker.config.get("share.coordinator.state.topic.num.partitions"))
            p = partitions[key] = partition_for_key(key, n)
        return broker.cluster.is_leader(SHARE_STATE_TOPIC, p)

    return LocalFirstPersister(CoordinatorPersister(broker.share_coordinator), remote, is_local)


def inter_broker_rpc_for(broker: Broker) -> InterBrokerRpc:
    """The client of a cluster member's other inter-broker RPCs (transaction markers and
    verification, dead-letter appends, admin fan-out): its own connection pool on the
    inter-broker listener, with the same configs as ``network_persister_for``. The caller owns
    it (``await rpc.close()``).

    Raises:
        InterBrokerConfigError: see ``inter_broker_listener`` / ``inter_broker_security``.
    """
    listener, pool, timeout_ms = _pool(broker.config)
    return InterBrokerRpc(broker.cluster, pool, listener=listener.name,
                          request_timeout_ms=timeout_ms)


def _pool(config: BrokerConfig) -> tuple[Listener, ConnectionPool, int]:
    """The inter-broker listener, a connection pool on it, and ``request.timeout.ms``.

    Raises:
        InterBrokerConfigError: see ``inter_broker_listener`` / ``inter_broker_security``.
    """
    listener = inter_broker_listener(config)
    timeout_ms = int(config.get("request.timeout.ms"))
    pool = ConnectionPool(
        f"shoal-broker-{config.node_id}", inter_broker_security(config, listener),
        connect_timeout=int(config.get("socket.connection.setup.timeout.ms")) / 1000,
        request_timeout=timeout_ms / 1000)
    return listener, pool, timeout_ms


class _StateTopicOnFirstUse:
    """The broker's ``ClusterMetadata`` for the persister, except that asking where a partition
    of ``__share_group_state`` lives before the topic exists creates it (in the background; the
    persister retries), as a FindCoordinator(SHARE) would."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker.cluster, name)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self._broker.cluster.partition(topic, partition)
        member = self._broker.member
        if info is None and member is not None and topic == SHARE_STATE_TOPIC:
            member.request_internal_topic(topic)
        return info
