"""Helpers for share-group tests with confluent_kafka.ShareConsumer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from kio.schema.errors import ErrorCode

from protocol import codec
from tests.integration.rawclient import RawClient

GROUP_RESOURCE = 32  # ConfigResource type GROUP on the wire


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on a GROUP resource, over the wire."""
    m = codec.request_module(44, 1)
    body = m.IncrementalAlterConfigsRequest(
        resources=(m.AlterConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=group,
            configs=tuple(m.AlterableConfig(name=k, config_operation=0, value=v)
                          for k, v in configs.items())),),
        validate_only=False)
    with RawClient(bootstrap) as c:
        resp = c.call(44, 1, body)
    (r,) = resp.responses
    assert r.error_code == ErrorCode.none, (r.error_code, r.error_message)


def initialize_share_state(bootstrap: str, group: str, topic: str, timeout: float = 10.0) -> None:
    """Have the group coordinator initialize the group's share state for every partition of
    ``topic`` (a member subscribes until it is assigned them all, then leaves), as a real
    consumer's join would. A ShareFetch for a share-partition that was never initialized fails,
    so raw-protocol tests that fetch without heartbeating call this first."""
    m = codec.request_module(3, 12)
    hb = codec.request_module(76, 1)
    member = f"init-{time.monotonic_ns() % 10**9}"
    deadline = time.monotonic() + timeout
    with RawClient(bootstrap) as c:
        meta = c.call(3, 12, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        (t,) = meta.topics
        want = len(t.partitions)
        epoch, topics, held = 0, (topic,), 0
        while held < want:
            assert time.monotonic() < deadline, f"share state of {topic} not initialized in time"
            resp = c.call(76, 1, hb.ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                subscribed_topic_names=topics))
            assert resp.error_code == ErrorCode.none, resp
            epoch, topics = resp.member_epoch, None
            if resp.assignment is not None:
                held = sum(len(tp.partitions) for tp in resp.assignment.topic_partitions
                           if tp.topic_id == t.topic_id)
            if held < want:
                time.sleep(0.05)
        left = c.call(76, 1, hb.ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=-1, rack_id=None,
            subscribed_topic_names=None))
        assert left.error_code == ErrorCode.none, left


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1, prefix: str = "m") -> list[bytes]:
    # Small producer batches so that batch-optimized acquisition can spread records over members.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.num.messages": 100})
    values = [f"{prefix}{i}".encode() for i in range(count)]
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, v, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0
    return values


def share_consumer(bootstrap: str, group: str, topic: str, explicit: bool = False,
                   **extra: Any) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit"}
    conf.update(extra)
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


def poll_until(consumers: list[ShareConsumer], done: Callable[[], bool], timeout: float = 30.0,
               on_message: Callable[[int, Any], None] | None = None) -> None:
    """Poll consumers round-robin until ``done()`` or the timeout; errors fail the test."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for share-group records"
        for i, c in enumerate(consumers):
            for msg in c.poll(0.2):
                err = msg.error()
                assert err is None, err
                if on_message is not None:
                    on_message(i, msg)


def drain(consumer: ShareConsumer, seconds: float, ack: AcknowledgeType | None = None) -> list[Any]:
    """Everything a consumer receives within ``seconds``."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for msg in consumer.poll(0.2):
            assert msg.error() is None, msg.error()
            got.append(msg)
            if ack is not None:
                consumer.acknowledge(msg, ack)
    return got
