"""Raw Produce / ListOffsets / InitProducerId calls for the produce-validation and idempotence tests."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.integration.rawclient import RawClient, request

PRODUCE_VERSION = 9


def produce(c: RawClient, topic: str, records: bytes, partition: int = 0,
            version: int = PRODUCE_VERSION) -> Any:
    """One partition's Produce (acks=all); returns its PartitionProduceResponse."""
    m = c.request_module(0, version)
    body = request(0, version, transactional_id=None, acks=-1, timeout=timedelta(seconds=10),
                   topic_data=(m.TopicProduceData(name=topic, partition_data=(
                       m.PartitionProduceData(index=partition, records=records),)),))
    resp = c.call(0, version, body)
    return resp.responses[0].partition_responses[0]


def log_end_offset(c: RawClient, topic: str, partition: int = 0) -> int:
    m = c.request_module(2, 7)
    resp = c.call(2, 7, request(2, 7, replica_id=-1, isolation_level=0, topics=(
        m.ListOffsetsTopic(name=topic, partitions=(
            m.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                   timestamp=-1),)),)))
    return int(resp.topics[0].partitions[0].offset)


def init_producer_id(c: RawClient) -> tuple[int, int]:
    resp = c.call(22, 4, request(22, 4, transactional_id=None,
                                 transaction_timeout=timedelta(seconds=60)))
    assert resp.error_code == 0, resp
    return int(resp.producer_id), int(resp.producer_epoch)
