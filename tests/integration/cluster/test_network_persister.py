"""The network persister against real brokers: share state kept with a share coordinator over
the wire (issue 23, "Inter-broker RPCs on the wire" and "Failures").

Each broker is a real ``shoal broker`` process with a SASL_PLAINTEXT (PLAIN) inter-broker
listener and ``super.users=User:broker``. The persister's client security comes from the same
broker configs through ``broker/inter_broker.py``; routing comes from a ``ClusterMetadata`` that
points at the real brokers. Shown: initialize/write/read/read_summary/delete round trip with the
broker's own share coordinator; many concurrent writes to one destination leave as few requests,
never more than one in flight; a broker restarted mid-way is found again within the deadline; a
broker that is gone fails its calls with Kafka's code after the deadline without holding back
calls to a live broker; a principal outside ``super.users`` gets CLUSTER_AUTHORIZATION_FAILED.
Last, the same round trip over SASL_SSL from the reference Kafka ``server.properties``
(tests/secure-server.properties: StandardAuthorizer, ``super.users=User:admin``, the JAAS login
of the listener), with nothing but ``inter.broker.listener.name`` and the mechanism added.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import trustme
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig, read_properties
from broker.inter_broker import inter_broker_listener, inter_broker_security
from client.pool import ConnectionPool
from client.security import SecuritySettings
from cluster.metadata import LocalMetadata, Node, PartitionInfo
from coordinator.share.service import partition_for_key
from persister.api import (
    DeleteParams,
    InitializeParams,
    PersisterStateBatch,
    ReadParams,
    SharePartitionKey,
    WriteParams,
)
from persister.network_persister import NetworkPersister
from protocol.codec import request_module
from protocol.messages import make
from tests.conftest import BrokerProcess, free_port

E = ErrorCode
STATE_TOPIC = "__share_group_state"
STATE_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions default
LISTENER = "SASL_PLAINTEXT"
WRITE = 85
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


def broker_configs(port: int) -> dict[str, str]:
    """The configs of a broker whose inter-broker listener is SASL_PLAINTEXT with PLAIN."""
    return {"listeners": f"{LISTENER}://127.0.0.1:{port}",
            "inter.broker.listener.name": LISTENER,
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            f"listener.name.{LISTENER.lower()}.plain.sasl.jaas.config": JAAS,
            "super.users": "User:broker"}


def start_broker(data: Path) -> BrokerProcess:
    port = free_port()
    b = BrokerProcess(data, broker_configs(port), port=port, listen=False)
    b.start()
    return b


def broker_security(port: int) -> SecuritySettings:
    """What a broker with these configs uses to call other brokers."""
    config = BrokerConfig(broker_configs(port))
    listener = inter_broker_listener(config)
    assert listener.name == LISTENER
    return inter_broker_security(config, listener)


def metadata_for(b: BrokerProcess, node_id: int = 1) -> LocalMetadata:
    return LocalMetadata(node_id, {LISTENER: ("127.0.0.1", b.port)},
                         lambda t: STATE_PARTITIONS if t == STATE_TOPIC else None)


class TwoBrokers:
    """A ``ClusterMetadata`` over two real brokers: node 1 leads the even state partitions,
    node 2 the odd ones."""

    node_id = 1
    clustered = True

    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports

    def live_nodes(self, listener: str) -> list[Node]:
        return [n for i in sorted(self.ports) if (n := self.node(i, listener)) is not None]

    def node(self, node_id: int, listener: str) -> Node | None:
        port = self.ports.get(node_id)
        return Node(node_id, "127.0.0.1", port) if port and listener == LISTENER else None

    def controller_id(self) -> int:
        return 1

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        if topic != STATE_TOPIC or not 0 <= partition < STATE_PARTITIONS:
            return None
        leader = 1 if partition % 2 == 0 else 2
        return PartitionInfo(leader, 0, (leader,), (leader,))

    def is_leader(self, topic: str, partition: int) -> bool:
        info = self.partition(topic, partition)
        return info is not None and info.leader == self.node_id


async def create_topic(pool: ConnectionPool, b: BrokerProcess, name: str, partitions: int) -> uuid.UUID:
    def build(v: int) -> object:
        m = request_module(19, v)
        return make(m.CreateTopicsRequest, topics=(make(
            m.CreatableTopic, name=name, num_partitions=partitions, replication_factor=1,
            assignments=(), configs=()),), timeout=timedelta(seconds=10), validate_only=False)

    _, resp = await pool.request(0, "127.0.0.1", b.port, 19, 5, 7, build, 15)
    (t,) = resp.topics
    assert t.error_code == E.none, t
    assert isinstance(t.topic_id, uuid.UUID)
    return t.topic_id


def persister(metadata: object, security: SecuritySettings, *, deadline_ms: int = 20_000,
              ) -> NetworkPersister:
    pool = ConnectionPool("test-persister", security, connect_timeout=2.0, request_timeout=10.0)
    return NetworkPersister(metadata, pool, listener=LISTENER,  # type: ignore[arg-type]
                            num_partitions=STATE_PARTITIONS, deadline_ms=deadline_ms,
                            request_timeout_ms=5_000, backoff_ms=50, backoff_max_ms=500)


def write_params(key: SharePartitionKey, start: int) -> WriteParams:
    return WriteParams(key, state_epoch=0, leader_epoch=0, start_offset=start,
                       delivery_complete_count=-1,
                       state_batches=(PersisterStateBatch(start, start + 4, 2, 1),))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("netpersist") / "data")
    yield b
    b.stop()


@pytest.fixture
async def topic(sasl_broker: BrokerProcess, unique: str) -> AsyncIterator[uuid.UUID]:
    pool = ConnectionPool("test-admin", broker_security(sasl_broker.port))
    try:
        yield await create_topic(pool, sasl_broker, unique, 64)
    finally:
        await pool.close()


async def test_state_round_trips_through_the_share_coordinator(
        sasl_broker: BrokerProcess, topic: uuid.UUID, unique: str) -> None:
    p = persister(metadata_for(sasl_broker), broker_security(sasl_broker.port))
    key = SharePartitionKey(unique, topic, 3)
    try:
        assert (await p.initialize(InitializeParams(key, state_epoch=1, start_offset=0))).error == E.none
        assert (await p.write(WriteParams(key, 1, 0, 10, 3, (
            PersisterStateBatch(10, 14, 2, 1), PersisterStateBatch(15, 19, 0, 2))))).error == E.none
        read = await p.read(ReadParams(key, leader_epoch=0))
        assert (read.error, read.state_epoch, read.start_offset) == (E.none, 1, 10)
        assert read.state_batches == (PersisterStateBatch(10, 14, 2, 1),
                                      PersisterStateBatch(15, 19, 0, 2))
        summary = await p.read_summary(ReadParams(key, leader_epoch=0))
        assert (summary.error, summary.state_epoch, summary.start_offset,
                summary.delivery_complete_count) == (E.none, 1, 10, 3)
        # The coordinator's own checks come back per key: a stale state epoch is fenced.
        stale = await p.write(WriteParams(key, 0, 0, 20, -1, ()))
        assert stale.error == E.fenced_state_epoch
        assert (await p.delete(DeleteParams(key))).error == E.none
        gone = await p.read_summary(ReadParams(key, leader_epoch=0))
        assert (gone.error, gone.start_offset) == (E.none, -1)
        assert p.stats()["requests"][(WRITE, 1)] == 2
    finally:
        await p.close()


async def test_concurrent_writes_to_one_broker_share_requests_one_in_flight(
        sasl_broker: BrokerProcess, topic: uuid.UUID, unique: str) -> None:
    p = persister(metadata_for(sasl_broker), broker_security(sasl_broker.port))
    keys = [SharePartitionKey(unique, topic, i) for i in range(64)]
    try:
        inits = await asyncio.gather(*(p.initialize(InitializeParams(k, 0, 0)) for k in keys))
        assert {r.error for r in inits} == {E.none}
        # Writes arrive one event-loop turn apart, so most come while a flush is in flight.
        tasks = []
        for k in keys:
            tasks.append(asyncio.create_task(p.write(write_params(k, 100 + k.partition))))
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        assert [r.error for r in results] == [E.none] * len(keys)
        stats = p.stats()
        assert stats["max_in_flight"][(WRITE, 1)] == 1
        assert 2 <= stats["requests"][(WRITE, 1)] < len(keys)
        # Every caller's own write is what the coordinator keeps.
        reads = await asyncio.gather(*(p.read(ReadParams(k, 0)) for k in keys))
        assert [r.start_offset for r in reads] == [100 + k.partition for k in keys]
    finally:
        await p.close()


async def test_a_restarted_broker_is_found_again_within_the_deadline(
        tmp_path: Path, unique: str) -> None:
    b = start_broker(tmp_path / "data")
    p = persister(metadata_for(b), broker_security(b.port), deadline_ms=60_000)
    try:
        admin = ConnectionPool("test-admin", broker_security(b.port))
        tid = await create_topic(admin, b, unique, 2)
        await admin.close()
        key = SharePartitionKey(unique, tid, 0)
        assert (await p.initialize(InitializeParams(key, 0, 0))).error == E.none
        assert (await p.write(write_params(key, 5))).error == E.none
        b.kill()
        during = asyncio.create_task(p.write(write_params(key, 7)))
        await asyncio.sleep(0.5)
        assert not during.done()  # retrying while the broker is down
        await asyncio.to_thread(b.start)
        assert (await during).error == E.none
        read = await p.read(ReadParams(key, 0))
        assert (read.error, read.start_offset) == (E.none, 7)
        assert p.stats()["errors"].get((WRITE, 1, "NETWORK_EXCEPTION"), 0) >= 1
    finally:
        await p.close()
        b.stop()


async def test_a_gone_broker_fails_after_the_deadline_without_holding_back_a_live_one(
        tmp_path: Path, unique: str) -> None:
    live, dead = start_broker(tmp_path / "live"), start_broker(tmp_path / "dead")
    p = persister(TwoBrokers({1: dead.port, 2: live.port}), broker_security(live.port),
                  deadline_ms=3_000)
    try:
        keys: dict[int, SharePartitionKey] = {}
        for node, b in ((1, dead), (2, live)):
            admin = ConnectionPool("test-admin", broker_security(b.port))
            tid = await create_topic(admin, b, unique, 8)
            await admin.close()
            for i in range(8):  # a key whose state partition the node leads
                k = SharePartitionKey(unique, tid, i)
                if partition_for_key(k, STATE_PARTITIONS) % 2 == node - 1:
                    keys[node] = k
                    break
            assert (await p.initialize(InitializeParams(keys[node], 0, 0))).error == E.none
        dead.kill()
        to_dead = asyncio.create_task(p.write(write_params(keys[1], 9)))
        to_live = asyncio.create_task(p.write(write_params(keys[2], 9)))
        done, _ = await asyncio.wait({to_dead, to_live}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {to_live} and to_live.result().error == E.none
        failed = await to_dead
        assert failed.error == E.network_exception, failed
        assert "3000 ms" in (failed.error_message or "")
        assert p.stats()["failed_calls"] == {(WRITE, "NETWORK_EXCEPTION"): 1}
    finally:
        await p.close()
        live.stop()
        dead.stop()


@pytest.mark.parametrize("user,password", [("alice", "alice-secret")])
async def test_a_principal_outside_super_users_is_refused(
        sasl_broker: BrokerProcess, topic: uuid.UUID, unique: str, user: str,
        password: str) -> None:
    security = SecuritySettings(protocol=LISTENER, sasl_mechanism="PLAIN", sasl_username=user,
                                sasl_password=password)
    p = persister(metadata_for(sasl_broker), security)
    key = SharePartitionKey(unique, topic, 0)
    refused = E.cluster_authorization_failed
    try:
        calls: list[Callable[[], object]] = [
            lambda: p.initialize(InitializeParams(key, 0, 0)),
            lambda: p.write(write_params(key, 0)),
            lambda: p.read(ReadParams(key, 0)),
            lambda: p.read_summary(ReadParams(key, 0)),
            lambda: p.delete(DeleteParams(key))]
        for call in calls:
            result = await call()  # type: ignore[misc]
            assert result.error == refused, result
            assert "CLUSTER_ACTION" in (result.error_message or "")
    finally:
        await p.close()


async def test_a_wrong_password_fails_at_once_with_sasl_authentication_failed(
        sasl_broker: BrokerProcess, topic: uuid.UUID, unique: str) -> None:
    """Not retried until the deadline: a login the broker refuses will not start working."""
    security = SecuritySettings(protocol=LISTENER, sasl_mechanism="PLAIN",
                                sasl_username="broker", sasl_password="wrong")
    p = persister(metadata_for(sasl_broker), security, deadline_ms=60_000)
    try:
        result = await asyncio.wait_for(p.write(write_params(SharePartitionKey(unique, topic, 0),
                                                             0)), 30)
        assert result.error == E.sasl_authentication_failed, result
        assert p.stats()["failed_calls"] == {(WRITE, "SASL_AUTHENTICATION_FAILED"): 1}
    finally:
        await p.close()


def test_over_sasl_ssl_from_a_kafka_server_properties(tmp_path: Path, unique: str) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(certs / "server.pem"))
    sasl_port, ssl_port = free_port(), free_port()
    reference = Path(__file__).parents[2] / "secure-server.properties"
    config_file = tmp_path / "server.properties"
    config_file.write_text(
        reference.read_text().replace("/etc/shoal/certs", str(certs))
        .replace(":9093", f":{sasl_port}").replace(":9094", f":{ssl_port}")
        .replace("log.dirs=/var/lib/shoal", f"log.dirs={tmp_path / 'data'}")
        + "inter.broker.listener.name=SASL_SSL\nsasl.mechanism.inter.broker.protocol=PLAIN\n")
    b = BrokerProcess(tmp_path / "data", port=sasl_port, listen=False,
                      extra_args=["--config", str(config_file)])
    b.start()
    try:
        config = BrokerConfig(read_properties(config_file))
        listener = inter_broker_listener(config)
        security = inter_broker_security(config, listener)
        assert (security.protocol, security.sasl_mechanism, security.sasl_username,
                security.ssl_ca_location, security.check_hostname) == (
            "SASL_SSL", "PLAIN", "admin", str(certs / "ca.pem"), True)
        asyncio.run(_round_trip_over(b, listener.name, security, unique))
    finally:
        assert b.stop() == 0, b.logs()


async def _round_trip_over(b: BrokerProcess, listener: str, security: SecuritySettings,
                           unique: str) -> None:
    admin = ConnectionPool("test-admin", security)
    try:
        tid = await create_topic(admin, b, unique, 1)
    finally:
        await admin.close()
    metadata = LocalMetadata(1, {listener: ("127.0.0.1", b.port)},
                             lambda t: STATE_PARTITIONS if t == STATE_TOPIC else None)
    pool = ConnectionPool("test-persister", security)
    p = NetworkPersister(metadata, pool, listener=listener, num_partitions=STATE_PARTITIONS)
    key = SharePartitionKey(unique, tid, 0)
    try:
        assert (await p.initialize(InitializeParams(key, 0, 0))).error == E.none
        assert (await p.write(write_params(key, 3))).error == E.none
        read = await p.read(ReadParams(key, 0))
        assert (read.error, read.start_offset) == (E.none, 3)
    finally:
        await p.close()
