"""Metadata (3) v0-12: brokers, cluster id, topics with stable topic IDs and their partitions.

Single broker: every partition is led by this node, with itself as the only replica and ISR.
Internal topics are listed only when asked for by name (Kafka hides them from "all topics").
Unknown topics are auto-created when the broker allows it (``auto.create.topics.enable``, with
``num.partitions`` partitions) and the request does (v4+ flag); a creation refused (open-file
limit) or failed answers that topic with the error code and creates nothing. The internal topics
are never auto-created here (UNKNOWN_TOPIC_OR_PARTITION until they exist): their coordinators
create them when first needed, with their own partition counts and configs, which an ordinary
topic of ``num.partitions`` would pre-empt for good (placement depends on the count).
Lookups by topic id (v10+) answer UNKNOWN_TOPIC_ID when the id is unknown.

Authorization (``broker/authz.py``), as Kafka's: a listing of all topics leaves out those the
principal may not DESCRIBE (quietly: not counted as refusals); a topic asked for by name without
DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether or not it exists, by id TOPIC_AUTHORIZATION_FAILED
with the id echoed and no name. Auto-creation also needs CREATE on the cluster or on the topic,
else TOPIC_AUTHORIZATION_FAILED. AuthorizedOperations bitfields (v8+, when asked): per topic, and
for the cluster (v8-10) only when the principal may DESCRIBE it (0 otherwise).
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.log.topics import TopicError
from broker.authz import (
    CLUSTER,
    OPERATIONS_NOT_REQUESTED,
    Operation,
    Resource,
    ResourceType,
)
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import broker_entries
from broker.wire_limits import YIELD_EVERY, Steps, run_steps, run_steps_async
from broker.log.topics import INTERNAL_TOPICS, Topic, topic_name_problem
from cluster.metadata import NO_LEADER, ClusterMetadata
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import MetadataRequest

log = logging.getLogger("shoal.broker")

API_KEY = 3
VERSIONS = (0, 12)


def partition_entry(cls: Any, node_id: int, topic: Topic, p: int,
                    cluster: ClusterMetadata | None = None) -> Any:
    """One partition's leader, epoch, replicas and ISR as ``cls`` (Metadata's and
    DescribeTopicPartitions' partition types share these fields), so both APIs tell the same.
    Without ``cluster`` (or a single broker's) ``node_id`` leads every partition; a cluster
    member tells each partition's leader, epoch, replicas, ISR and the replicas on brokers that
    are down, and LEADER_NOT_AVAILABLE with leader -1 for a partition no live replica leads (its
    ISR then names the last in-sync replica, as Kafka's does). The ELR fields (DescribeTopicPartitions
    only) are empty, never null: Kafka's Admin reads them unchecked."""
    if cluster is None or not cluster.clustered:
        return make(cls, error_code=ErrorCode.none, partition_index=p, leader_id=node_id,
                    leader_epoch=0, replica_nodes=(node_id,), isr_nodes=(node_id,),
                    offline_replicas=(), eligible_leader_replicas=(), last_known_elr=())
    info = cluster.partition(topic.name, p)
    if info is None:  # created here, not yet in the view: say so, the client asks again
        return make(cls, error_code=ErrorCode.leader_not_available, partition_index=p,
                    leader_id=-1, leader_epoch=-1, replica_nodes=(), isr_nodes=(),
                    offline_replicas=(), eligible_leader_replicas=(), last_known_elr=())
    offline = info.leader == NO_LEADER
    return make(cls, error_code=ErrorCode.leader_not_available if offline else ErrorCode.none,
                partition_index=p, leader_id=info.leader, leader_epoch=info.leader_epoch,
                replica_nodes=info.replicas, isr_nodes=info.isr,
                offline_replicas=info.offline_replicas,
                eligible_leader_replicas=(), last_known_elr=())


def topic_entry(m: Any, node_id: int, topic: Topic,
                ops: int = OPERATIONS_NOT_REQUESTED, cluster: ClusterMetadata | None = None) -> Any:
    parts = tuple(partition_entry(m.MetadataResponsePartition, node_id, topic, p, cluster)
                  for p in range(topic.partitions))
    return make(m.MetadataResponseTopic, error_code=ErrorCode.none, name=topic.name,
                topic_id=topic.topic_id, is_internal=topic.internal, partitions=parts,
                topic_authorized_operations=ops)


def _error_entry(m: Any, error: ErrorCode, name: str | None, topic_id: Any = None) -> Any:
    return make(m.MetadataResponseTopic, error_code=error, name=name, topic_id=topic_id,
                is_internal=False, partitions=(),
                topic_authorized_operations=OPERATIONS_NOT_REQUESTED)


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic (Kafka asks the cluster
    quietly first)."""
    return (ctx.authorized(Operation.CREATE, CLUSTER, audit=False)
            or ctx.authorized(Operation.CREATE, Resource(ResourceType.TOPIC, name)))


def handle(ctx: RequestContext, req: MetadataRequest) -> Any:
    steps = _answer(ctx, req)
    if req.topics is not None and len(req.topics) > YIELD_EVERY:
        return _paced(steps)  # the loop is served every YIELD_EVERY topics (issue 25)
    return run_steps(steps)


async def _paced(steps: Steps[Any]) -> Any:
    out = await run_steps_async(steps)
    return await out if inspect.isawaitable(out) else out


def _answer(ctx: RequestContext, req: MetadataRequest) -> Steps[Any]:
    """The response, or (cluster mode, topics to auto-create) a coroutine answering it."""
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    node = broker.node_id
    v8 = ctx.api_version >= 8
    topic_ops = v8 and bool(getattr(req, "include_topic_authorized_operations", False))

    def entry(t: Topic) -> Any:
        ops = (ctx.authorized_operations(Resource(ResourceType.TOPIC, t.name)) if topic_ops
               else OPERATIONS_NOT_REQUESTED)
        return topic_entry(m, node, t, ops, broker.cluster)

    topics: list[Any] = []
    pending: list[tuple[int, str]] = []  # cluster mode: (position, name) to auto-create
    if req.topics is None or (ctx.api_version == 0 and not req.topics):
        listed = [t for t in broker.topics.all() if not t.internal]
        hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in listed),
                            audit=False)
        topics = [entry(t) for t in listed if t.name not in hidden]
    else:
        allow_auto = getattr(req, "allow_auto_topic_creation", True)
        rt: Any  # the MetadataRequestTopic of req's version (enumerate over their union)
        for step, rt in enumerate(req.topics):
            if step and step % YIELD_EVERY == 0:
                yield
            name = rt.name
            topic_id = getattr(rt, "topic_id", None)
            if name is None and (ctx.api_version < 12 or topic_id is None or topic_id.int == 0):
                if ctx.api_version >= 12:
                    topics.append(_error_entry(m, ErrorCode.unknown_topic_id, None, topic_id))
                else:
                    # v10-11 responses cannot carry a null name: Kafka refuses a null name below
                    # v12 (KafkaApis.handleTopicMetadataRequest). Encoding null failed here.
                    topics.append(_error_entry(m, ErrorCode.invalid_request, "", topic_id))
                continue
            if name is None:
                t = broker.topics.by_id(topic_id)
                if t is None:
                    topics.append(_error_entry(m, ErrorCode.unknown_topic_id, None, topic_id))
                elif not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.TOPIC, t.name)):
                    # Topic ids are not secret: the id is echoed, the name is not (as Kafka).
                    topics.append(_error_entry(m, ErrorCode.topic_authorization_failed, None,
                                               topic_id))
                else:
                    topics.append(entry(t))
                continue
            if not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.TOPIC, name)):
                # Not even whether it exists is told.
                topics.append(_error_entry(m, ErrorCode.topic_authorization_failed, name))
                continue
            t = broker.topics.get(name)
            # The coordinators create their internal topics with their own partition counts and
            # configs when first needed; a Metadata request never makes one an ordinary topic.
            may_create = allow_auto and name not in INTERNAL_TOPICS
            if (t is None and may_create and broker.config.get("auto.create.topics.enable")
                    and not topic_name_problem(name) and not _may_create(ctx, name)):
                topics.append(_error_entry(m, ErrorCode.topic_authorization_failed, name))
                continue
            if t is None and may_create and broker.member is not None:
                if broker.config.get("auto.create.topics.enable") and not topic_name_problem(name):
                    pending.append((len(topics), name))
                    topics.append(None)
                    continue
            if t is None and may_create:
                try:
                    t = broker.auto_create(name)
                except TopicError as exc:
                    log.warning("auto-creating topic %s failed: %s", name, exc.message)
                    topics.append(_error_entry(m, exc.error, name))
                    continue
            if t is None:
                problem = topic_name_problem(name)
                code = ErrorCode.invalid_topic_exception if problem else ErrorCode.unknown_topic_or_partition
                topics.append(_error_entry(m, code, name))
            else:
                topics.append(entry(t))
    cluster_ops = OPERATIONS_NOT_REQUESTED
    if v8 and getattr(req, "include_cluster_authorized_operations", False):
        # Kafka: only to a principal allowed to describe the cluster; 0 otherwise.
        cluster_ops = (ctx.authorized_operations(CLUSTER)
                       if ctx.authorized(Operation.DESCRIBE, CLUSTER, audit=False) else 0)

    def response() -> Any:
        brokers = broker_entries(ctx, m, "MetadataResponseBroker")
        return make(m.MetadataResponse, throttle_time=NO_THROTTLE, brokers=brokers,
                    cluster_id=broker.cluster_id, controller_id=broker.cluster.controller_id(),
                    topics=tuple(topics), cluster_authorized_operations=cluster_ops)

    if not pending:
        return response()

    async def create_then_answer() -> Any:
        for i, name in pending:
            try:
                t = broker.topics.get(name) or await broker.admin_create_topic(
                    name, broker.config.get("num.partitions"))
            except TopicError as exc:
                if exc.error == ErrorCode.topic_already_exists and broker.topics.get(name):
                    topics[i] = entry(broker.topics.get(name))  # type: ignore[arg-type]
                    continue
                log.warning("auto-creating topic %s failed: %s", name, exc.message)
                topics[i] = _error_entry(m, exc.error, name)
                continue
            topics[i] = entry(t)
        return response()

    return create_then_answer()
