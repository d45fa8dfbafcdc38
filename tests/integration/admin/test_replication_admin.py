"""Replication admin APIs on a single broker (no --cluster): what Kafka answers for one broker.

It leads every partition as the only replica, so ElectLeaders is never needed, a partition can
only be "reassigned" to this broker (a no-op), no move is ever in progress, and a replication
factor above 1 is refused with a message saying how to get one.
"""

from __future__ import annotations

from datetime import timedelta

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.rawclient import RawClient, request

T = 30


def test_a_single_broker_answers_replication_admin_as_kafka_does(broker, unique) -> None:
    topic = f"rep-{unique}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(T)
    with RawClient(broker.bootstrap) as c:
        m = RawClient.request_module(19, 7)
        too_many = c.call(19, 7, request(19, 7, topics=(m.CreatableTopic(
            name=f"rf3-{unique}", num_partitions=1, replication_factor=3, assignments=(),
            configs=()),), timeout=timedelta(seconds=T), validate_only=False)).topics[0]
        assert too_many.error_code == ErrorCode.invalid_replication_factor
        assert "single broker" in too_many.error_message and "--cluster" in too_many.error_message

        em = RawClient.request_module(43, 2)
        elected = c.call(43, 2, request(43, 2, election_type=0, 
                                        topic_partitions=(em.TopicPartitions(
                                            topic=topic, partitions=(0, 1, 5)),)))
        assert elected.error_code == ErrorCode.none
        [result] = elected.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
            (0, ErrorCode.election_not_needed), (1, ErrorCode.election_not_needed),
            (5, ErrorCode.unknown_topic_or_partition)]
        every = c.call(43, 2, request(43, 2, election_type=1, 
                                      topic_partitions=None))
        assert all(not r.partition_result for r in every.replica_election_results)

        am = RawClient.request_module(45, 0)
        moved = c.call(45, 0, request(45, 0, topics=(am.ReassignableTopic(
            name=topic, partitions=(
                am.ReassignablePartition(partition_index=0, replicas=(broker_id(c),)),
                am.ReassignablePartition(partition_index=1, replicas=(99,)),
                am.ReassignablePartition(partition_index=0, replicas=None))),)))
        assert [(p.partition_index, p.error_code) for p in moved.responses[0].partitions] == [
            (0, ErrorCode.none), (1, ErrorCode.invalid_replica_assignment),
            (0, ErrorCode.no_reassignment_in_progress)]
        assert "99" in moved.responses[0].partitions[1].error_message

        listed = c.call(46, 0, request(46, 0, topics=None))
        assert (listed.error_code, listed.topics) == (ErrorCode.none, ())


def broker_id(c: RawClient) -> int:
    md = c.call(3, 12, request(3, 12, topics=(), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False))
    return int(md.brokers[0].node_id)
