"""Metadata (3) v0-12: brokers, cluster id, topics with stable topic IDs and their partitions.

Single broker: every partition is led by this node, with itself as the only replica and ISR.
Internal topics are listed only when asked for by name (Kafka hides them from "all topics").
Unknown topics are auto-created when the broker allows it (``auto.create.topics.enable``, with
``num.partitions`` partitions) and the request does (v4+ flag); a creation refused (open-file
limit) or failed answers that topic with the error code and creates nothing.
Lookups by topic id (v10+) answer UNKNOWN_TOPIC_ID when the id is unknown.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.app import TopicError
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.topics import Topic, topic_name_problem
from protocol.codec import response_module
from protocol.messages import make

log = logging.getLogger("shoal.broker")

API_KEY = 3
VERSIONS = (0, 12)


def topic_entry(m: Any, node_id: int, topic: Topic) -> Any:
    parts = tuple(
        make(m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=p,
             leader_id=node_id, leader_epoch=0, replica_nodes=(node_id,), isr_nodes=(node_id,),
             offline_replicas=())
        for p in range(topic.partitions)
    )
    return make(m.MetadataResponseTopic, error_code=ErrorCode.none, name=topic.name,
                topic_id=topic.topic_id, is_internal=topic.internal, partitions=parts,
                topic_authorized_operations=-2147483648)


def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    node = broker.node_id
    host, port = ctx.advertised
    topics: list[Any] = []
    if req.topics is None or (ctx.api_version == 0 and not req.topics):
        topics = [topic_entry(m, node, t) for t in broker.topics.all() if not t.internal]
    else:
        allow_auto = getattr(req, "allow_auto_topic_creation", True)
        for rt in req.topics:
            name = rt.name
            topic_id = getattr(rt, "topic_id", None)
            if name is None:
                t = broker.topics.by_id(topic_id) if topic_id is not None else None
                if t is not None:
                    topics.append(topic_entry(m, node, t))
                elif ctx.api_version >= 12:
                    topics.append(make(m.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_id,
                                       name=None, topic_id=topic_id, is_internal=False, partitions=()))
                else:
                    # v10-11 responses cannot carry a null name: Kafka refuses a null name below
                    # v12 (KafkaApis.handleTopicMetadataRequest). Encoding null failed here.
                    topics.append(make(m.MetadataResponseTopic, error_code=ErrorCode.invalid_request,
                                       name="", topic_id=topic_id, is_internal=False, partitions=()))
                continue
            t = broker.topics.get(name)
            if t is None and allow_auto:
                try:
                    t = broker.auto_create(name)
                except TopicError as exc:
                    log.warning("auto-creating topic %s failed: %s", name, exc.message)
                    topics.append(make(m.MetadataResponseTopic, error_code=exc.error, name=name,
                                       topic_id=None, is_internal=False, partitions=()))
                    continue
            if t is None:
                problem = topic_name_problem(name)
                code = ErrorCode.invalid_topic_exception if problem else ErrorCode.unknown_topic_or_partition
                topics.append(make(m.MetadataResponseTopic, error_code=code, name=name,
                                   topic_id=None, is_internal=False, partitions=()))
            else:
                topics.append(topic_entry(m, node, t))
    brokers = (make(m.MetadataResponseBroker, node_id=node, host=host, port=port, rack=None),)
    return make(m.MetadataResponse, throttle_time=NO_THROTTLE, brokers=brokers,
                cluster_id=broker.cluster_id, controller_id=node, topics=tuple(topics),
                cluster_authorized_operations=-2147483648)
