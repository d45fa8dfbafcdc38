"""The tool APIs' handlers without a server (issue 25): DescribeTopicPartitions' cursor and
limit corners, DescribeProducers' per-partition errors (a storage fault included), DescribeLogDirs
on an offline directory, ListConfigResources' versions and types, and each one's authorization."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.metadata import LocalMetadata
from broker.authz import DefaultAuthorizer, DenialLog, Operation, Principal, Resource
from broker.clock import FakeClock
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import describe_log_dirs, describe_producers, describe_topic_partitions
from broker.handlers import list_config_resources
from broker.log.producer_state import ProducerStates
from broker.log.topics import Topic
from broker.metrics import LabelledCounter
from broker.wire_limits import EncodeOffLoop
from protocol.codec import request_module
from storage.log_dir import LogDir

ANON = Principal("User", "ANONYMOUS")


class Allow:
    """An enforcing authorizer that allows what ``allowed`` says and records refusals."""

    enforcing = True

    def __init__(self, allowed: Any) -> None:
        self.allowed = allowed

    def authorize(self, principal: Principal, operation: Operation, resource: Resource,
                  host: str = "*") -> bool:
        return bool(self.allowed(operation, resource))

    def authorized_operations(self, principal: Principal, resource: Resource,
                              host: str = "*") -> int:
        return 8


class Topics:
    def __init__(self, *topics: Topic) -> None:
        self._t = {t.name: t for t in topics}

    def get(self, name: str | None) -> Topic | None:
        return self._t.get(name or "")

    def all(self) -> list[Topic]:
        return list(self._t.values())


def _broker(tmp_path: Path, *topics: Topic, authorizer: Any = None, **config: str) -> Any:
    registry = Topics(*topics)
    return SimpleNamespace(
        topics=registry, node_id=1, config=BrokerConfig(config),
        cluster=LocalMetadata(1, {}, lambda t: (x.partitions if (x := registry.get(t)) else None)),
        authorizer=authorizer if authorizer is not None else DefaultAuthorizer(),
        metrics=SimpleNamespace(authorization_denied=LabelledCounter(
            "denied_total", "", ("operation", "resource_type"))),
        denials=DenialLog(), clock=FakeClock(), data_dir=tmp_path)


def _ctx(broker: Any, api_key: int, version: int = 0) -> RequestContext:
    return RequestContext(broker=broker, api_key=api_key, api_version=version,
                          correlation_id=1, client_id="t", client_host="10.0.0.1",
                          connection_id=1, principal=ANON)


def _topic(name: str, partitions: int) -> Topic:
    return Topic(name, uuid.uuid4(), partitions)


# -- DescribeTopicPartitions ----------------------------------------------------------------------

def _dtp(broker: Any, names: tuple[str, ...], limit: int = 2000,
         cursor: tuple[str, int] | None = None) -> Any:
    m = request_module(75, 0)
    req = m.DescribeTopicPartitionsRequest(
        topics=tuple(m.TopicRequest(name=n) for n in names), response_partition_limit=limit,
        cursor=None if cursor is None else m.Cursor(topic_name=cursor[0],
                                                    partition_index=cursor[1]))
    resp = describe_topic_partitions.handle(_ctx(broker, 75), req)
    return resp.body if isinstance(resp, EncodeOffLoop) else resp


def _listing(resp: Any) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics]


def test_a_topic_ending_at_the_limit_points_the_cursor_at_the_next_topic(tmp_path: Path) -> None:
    b = _broker(tmp_path, _topic("a", 2), _topic("b", 2))
    resp = _dtp(b, (), limit=2)
    assert _listing(resp) == [("a", [0, 1])]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("b", 0)
    last = _dtp(b, (), limit=2, cursor=("b", 0))
    assert _listing(last) == [("b", [0, 1])] and last.next_cursor is None


def test_the_broker_caps_the_requested_limit(tmp_path: Path) -> None:
    b = _broker(tmp_path, _topic("a", 5), **{"max.request.partition.size.limit": "3"})
    resp = _dtp(b, ("a",), limit=100)
    assert _listing(resp) == [("a", [0, 1, 2])]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("a", 3)


def test_a_cursor_past_the_partitions_lists_none_of_them_and_moves_on(tmp_path: Path) -> None:
    b = _broker(tmp_path, _topic("a", 2), _topic("b", 1))
    resp = _dtp(b, ("a", "b"), limit=10, cursor=("a", 7))
    assert _listing(resp) == [("a", []), ("b", [0])] and resp.next_cursor is None


def test_bad_cursors_and_limits_are_invalid_request(tmp_path: Path) -> None:
    b = _broker(tmp_path, _topic("a", 2), _topic("b", 1))
    for kwargs in ({"cursor": ("b", 0)}, {"cursor": ("a", -1)}, {"limit": 0}):
        names = ("a",)
        resp = _dtp(b, names, **kwargs)  # type: ignore[arg-type]
        assert [(t.name, t.error_code) for t in resp.topics] == [
            ("a", ErrorCode.invalid_request)], kwargs
        assert resp.next_cursor is None


def test_describe_is_needed_per_topic_and_the_listing_hides_quietly(
        tmp_path: Path) -> None:
    auth = Allow(lambda op, res: op == Operation.DESCRIBE and res.name != "a")
    b = _broker(tmp_path, _topic("a", 2), _topic("b", 3), authorizer=auth)
    named = _dtp(b, ("a", "b", "zz"), cursor=("a", 1))
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("b", ErrorCode.none), ("zz", ErrorCode.unknown_topic_or_partition),
        ("a", ErrorCode.topic_authorization_failed)]
    assert named.topics[0].topic_authorized_operations == 8
    assert [p.partition_index for p in named.topics[0].partitions] == [0, 1, 2]
    listing = _dtp(b, ())
    assert _listing(listing) == [("b", [0, 1, 2])]  # "a" is left out, quietly
    assert b.metrics.authorization_denied.get(("DESCRIBE", "TOPIC")) == 1  # the named one only


# -- DescribeProducers ---------------------------------------------------------------------------

class Producers:
    def __init__(self, states: dict[tuple[str, int], ProducerStates],
                 broken: set[tuple[str, int]] = frozenset()) -> None:  # type: ignore[assignment]
        self._s, self._broken = states, broken

    def states(self, topic: str, partition: int) -> ProducerStates:
        if (topic, partition) in self._broken:
            raise OSError(5, "Input/output error")
        return self._s.get((topic, partition), ProducerStates())


def _describe_producers(broker: Any, *topics: tuple[str, tuple[int, ...]]) -> Any:
    m = request_module(61, 0)
    req = m.DescribeProducersRequest(topics=tuple(
        m.TopicRequest(name=n, partition_indexes=ps) for n, ps in topics))
    resp = asyncio.run(describe_producers.handle(_ctx(broker, 61), req))
    return resp.body if isinstance(resp, EncodeOffLoop) else resp


def test_describe_producers_answers_each_partition(tmp_path: Path) -> None:
    s = ProducerStates()
    s.observe(7, 2, 0, 3, 10, 12, now_ms=1_000, transactional=True)
    b = _broker(tmp_path, _topic("t", 3))
    b.producers = Producers({("t", 0): s}, broken={("t", 2)})
    resp = _describe_producers(b, ("t", (0, 1, 2, 3)), ("nope", (0,)), ("", (0,)))
    p0, p1, p2, p3 = resp.topics[0].partitions
    (st,) = p0.active_producers
    assert (st.producer_id, st.producer_epoch, st.last_sequence, st.last_timestamp,
            st.coordinator_epoch, st.current_txn_start_offset) == (7, 2, 2, 1_000, -1, 10)
    assert p1.error_code == ErrorCode.none and p1.active_producers == ()
    assert p2.error_code == ErrorCode.kafka_storage_error and "Input/output" in p2.error_message
    assert p3.error_code == ErrorCode.unknown_topic_or_partition
    assert resp.topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert resp.topics[2].partitions[0].error_code == ErrorCode.invalid_topic_exception


def test_describe_producers_needs_read_on_the_topic(tmp_path: Path) -> None:
    auth = Allow(lambda op, res: op == Operation.DESCRIBE)  # DESCRIBE is not READ
    b = _broker(tmp_path, _topic("t", 1), authorizer=auth)
    b.producers = Producers({})
    resp = _describe_producers(b, ("t", (0,)), ("unknown", (0,)))
    assert [p.error_code for t in resp.topics for p in t.partitions] == [
        ErrorCode.topic_authorization_failed] * 2  # existence is not told


# -- DescribeLogDirs -----------------------------------------------------------------------------

def _log_dirs(broker: Any, version: int = 4) -> Any:
    req = request_module(35, version).DescribeLogDirsRequest(topics=None)
    resp = describe_log_dirs.handle(_ctx(broker, 35, version), req)
    return resp.body if isinstance(resp, EncodeOffLoop) else resp


def test_an_offline_log_dir_is_kafka_storage_error(tmp_path: Path) -> None:
    d = LogDir(tmp_path)
    d.fail("syncing t-0", OSError(28, "No space left on device"))
    b = _broker(tmp_path)
    b.logs = SimpleNamespace(log_dir=d, items=lambda: [], get=lambda t, p: None)
    (r,) = _log_dirs(b).results
    assert (r.error_code, r.log_dir, r.topics) == (
        ErrorCode.kafka_storage_error, str(tmp_path.resolve()), ())


def test_describe_log_dirs_needs_describe_on_the_cluster(tmp_path: Path) -> None:
    b = _broker(tmp_path, authorizer=Allow(lambda op, res: op != Operation.DESCRIBE))
    resp = _log_dirs(b)
    assert (resp.error_code, resp.results) == (ErrorCode.cluster_authorization_failed, ())


# -- ListConfigResources -------------------------------------------------------------------------

def _list(broker: Any, version: int, types: tuple[int, ...] = ()) -> Any:
    m = request_module(74, version)
    req = m.ListConfigResourcesRequest(resource_types=types) if version else \
        m.ListConfigResourcesRequest()
    resp = list_config_resources.handle(_ctx(broker, 74, version), req)
    return resp.body if isinstance(resp, EncodeOffLoop) else resp


def test_list_config_resources_by_type(tmp_path: Path) -> None:
    b = _broker(tmp_path, _topic("t", 1))
    b.group_configs = SimpleNamespace(group_ids=lambda: ["g1", "g2"])
    both = _list(b, 1, (32, 2, 32))
    assert [(r.resource_name, r.resource_type) for r in both.config_resources] == [
        ("g1", 32), ("g2", 32), ("t", 2)]
    assert _list(b, 1, (16,)).config_resources == ()
    assert _list(b, 1, (64,)).error_code == ErrorCode.unsupported_version
    assert _list(b, 0).config_resources == ()  # v0: client-metrics resources only


def test_list_config_resources_needs_describe_configs_on_the_cluster(tmp_path: Path) -> None:
    b = _broker(tmp_path, authorizer=Allow(lambda op, res: op != Operation.DESCRIBE_CONFIGS))
    resp = _list(b, 1)
    assert (resp.error_code, resp.config_resources) == (
        ErrorCode.cluster_authorization_failed, ())
