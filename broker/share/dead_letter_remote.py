"""Dead-letter batches for a DLQ partition led by another cluster member: a Produce to its leader.

A cluster member's share-partition leader dead-letters records of partitions it leads, but the
DLQ partition (``source % partitions``) may be led elsewhere. Then the batch goes as a Produce
request (acks=all, so the leader answers after its flush policy, as a local append does) over
the inter-broker client (``broker.links.rpc``, authenticated as a ``super.users`` principal, which
may write the DLQ topic whatever its ACLs: the broker writes dead letters itself, KIP-1191).

``remote_leader`` says where to send (None: append here, a single broker always); ``append_remote``
answers a ``PartitionOutcome`` as ``append_partition`` does, with NETWORK_EXCEPTION or
REQUEST_TIMED_OUT when the leader gave no answer; ``RETRIABLE_APPEND_ERRORS`` are the codes the
writer retries later (records stay ARCHIVING).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.inter_broker_rpc import InterBrokerRpc
from broker.log.append import NEWEST_PRODUCE_VERSION, PartitionOutcome
from cluster.metadata import NO_LEADER
from protocol.codec import request_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker

__all__ = ["RETRIABLE_APPEND_ERRORS", "append_remote", "remote_leader"]

PRODUCE = 0
#: Produce v3 is the first with record batches v2; v12 the newest a Shoal broker serves by name.
PRODUCE_VERSIONS = (3, NEWEST_PRODUCE_VERSION)
RETRIABLE_APPEND_ERRORS = frozenset({
    ErrorCode.kafka_storage_error, ErrorCode.unknown_topic_or_partition,
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.network_exception, ErrorCode.request_timed_out,
    ErrorCode.coordinator_not_available, ErrorCode.not_enough_replicas})


def remote_leader(broker: Broker, topic: str, partition: int) -> int | None:
    """The broker to send ``topic``-``partition``'s appends to, None to append here (a single
    broker, this broker leads it, or the cluster does not know the partition yet); -1 while
    it is offline."""
    if broker.links is None:
        return None
    info = broker.cluster.partition(topic, partition)
    if info is None or info.leader == broker.cluster.node_id:
        return None
    return info.leader if info.leader != NO_LEADER else -1


async def append_remote(rpc: InterBrokerRpc, leader: int, topic: str, partition: int,
                        batch: bytes) -> PartitionOutcome:
    """Produce ``batch`` to ``topic``-``partition`` at broker ``leader`` (module doc)."""
    if leader < 0:
        return PartitionOutcome(ErrorCode.leader_not_available,
                                message=f"{topic}-{partition} has no live leader")
    timeout = datetime.timedelta(milliseconds=rpc.request_timeout_ms)

    def build(version: int) -> object:
        m = request_module(PRODUCE, version)
        return make(m.ProduceRequest, transactional_id=None, acks=-1, timeout=timeout,
                    topic_data=(make(m.TopicProduceData, name=topic, partition_data=(
                        make(m.PartitionProduceData, index=partition, records=batch),)),))

    response, code, message = await rpc.send(leader, PRODUCE, PRODUCE_VERSIONS, build)
    if response is None:
        return PartitionOutcome(code, message=message)
    for t in response.responses:
        for p in t.partition_responses:
            if t.name == topic and int(p.index) == partition:
                return PartitionOutcome(ErrorCode(p.error_code), int(p.base_offset),
                                        int(p.log_start_offset),
                                        message=getattr(p, "error_message", None))
    return PartitionOutcome(ErrorCode.unknown_server_error,
                            message=f"broker {leader} did not answer for {topic}-{partition}")
