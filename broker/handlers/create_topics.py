"""CreateTopics (19) v2-7: create topics with a partition count and per-topic configs.

Per topic, in this order (the first failing check is the answer; other topics are unaffected):

- a name given twice in one request -> INVALID_REQUEST for that name, which is not created
  (Kafka's controller answers duplicates the same way, once per name);
- an illegal name -> INVALID_TOPIC_EXCEPTION; a name taken -> TOPIC_ALREADY_EXISTS; a name that
  differs from an existing one only by '.' vs '_' -> INVALID_TOPIC_EXCEPTION (the two would
  collide in metric names, so Kafka refuses it too);
- partitions: -1 means ``num.partitions``; 0 or below -1 -> INVALID_PARTITIONS;
- replication factor: -1 means ``default.replication.factor``; below 1, above 1 on a single
  broker, or above the cluster's available brokers -> INVALID_REPLICATION_FACTOR;
- manual assignments: only with partitions and replication factor both -1 (else
  INVALID_REQUEST); honoured when they list partitions 0..n-1 (else
  INVALID_REPLICA_ASSIGNMENT), each on exactly this broker on a single broker, or in a cluster
  on registered brokers, none twice, the same count for every partition (else
  INVALID_REPLICA_ASSIGNMENT naming the partition);
- configs: unknown names, invalid values and null values -> INVALID_CONFIG naming the config;
- the new partitions must fit the broker's open-file limit -> POLICY_VIOLATION saying how to
  raise it (``broker/resources.py``);
- creation is atomic (``Broker.create_topic``): if a partition log cannot be opened or
  ``topics.json`` not written, nothing of the topic is kept -> KAFKA_STORAGE_ERROR (or
  POLICY_VIOLATION when out of file descriptors) with the path and errno.

Authorization (``broker/authz.py``), as Kafka's controller: CREATE on the cluster (asked
quietly) allows every topic, else CREATE on each topic -> TOPIC_AUTHORIZATION_FAILED (after the
duplicate check, before any other). The configs, partition count and replication factor are
returned only to a principal with DESCRIBE_CONFIGS on the topic; otherwise
``topic_config_error_code`` is TOPIC_AUTHORIZATION_FAILED and the topic is still created.

``validate_only`` runs every check and answers as if created, creating nothing. v5+ answers
also carry the partition count, replication factor and the resulting configs (as DescribeConfigs
would report them), and v7+ the new topic id.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.log.topics import TopicError
from broker.authz import CLUSTER, Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.wire_limits import YIELD_EVERY, denied_in_slices, in_slices
from broker.handlers._common import NO_THROTTLE, OK, err_message
from broker.handlers.describe_configs import topic_entries
from protocol.codec import response_module
from protocol.messages import has_field, make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import CreateTopicsRequest

API_KEY = 19
VERSIONS = (2, 7)


@dataclass(slots=True)
class Created:
    """The outcome for one requested topic."""

    name: str
    error: ErrorCode = OK
    message: str | None = None
    topic_id: Any = None
    partitions: int = -1
    replication: int = -1
    configs: dict[str, Any] = field(default_factory=dict)
    # False: the caller may not DESCRIBE_CONFIGS the topic, so nothing of its config is shown.
    describable: bool = True


def _collision(broker: Broker, name: str) -> str | None:
    key = name.replace(".", "_")
    for t in broker.topics.all():
        if t.name != name and t.name.replace(".", "_") == key:
            return f"topic {name!r} collides with existing topic {t.name!r} ('.' and '_' clash)"
    return None


def _assignments(broker: Broker, t: Any) -> list[tuple[int, ...]]:
    """The replica lists of a manual assignment, by partition.

    Raises:
        TopicError: the assignment is combined with counts, or places replicas where they
            cannot go (another broker than this one on a single broker; an unregistered
            broker, a broker twice or differing replica counts in a cluster).
    """
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise TopicError(ErrorCode.invalid_request,
                         "give either num_partitions/replication_factor or a replica "
                         "assignment, not both")
    indexes = sorted(a.partition_index for a in t.assignments)
    if indexes != list(range(len(indexes))):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"assigned partitions must be 0..{len(indexes) - 1} each exactly once, "
                         f"got {indexes}")
    by_partition = sorted(t.assignments, key=lambda a: a.partition_index)
    replicas = [tuple(a.broker_ids) for a in by_partition]
    if broker.member is not None:
        problem = broker.member.assignment_problem(replicas)
        if problem:
            raise TopicError(ErrorCode.invalid_replica_assignment, problem)
        return replicas
    node = broker.node_id
    for a in t.assignments:
        if list(a.broker_ids) != [node]:
            raise TopicError(ErrorCode.invalid_replica_assignment,
                             f"partition {a.partition_index} is assigned to brokers "
                             f"{list(a.broker_ids)}; the only broker is {node}")
    return replicas


async def create_one(broker: Broker, t: Any, validate_only: bool) -> Created:
    """Check and (unless ``validate_only``) create one topic; failures are in the result."""
    out = Created(t.name)
    try:
        partitions = t.num_partitions
        replication = t.replication_factor
        assignments = None
        if t.assignments:
            assignments = _assignments(broker, t)
            partitions, replication = len(assignments), len(assignments[0])
        partitions = broker.check_new_topic(t.name, partitions, replication)
        replication = broker.replication_for(replication)
        collision = _collision(broker, t.name)
        if collision:
            raise TopicError(ErrorCode.invalid_topic_exception, collision)
        for c in t.configs:
            if c.value is None:
                raise TopicError(ErrorCode.invalid_config,
                                 f"null value is not allowed for topic config {c.name!r}")
        configs = broker.validate_topic_configs({c.name: c.value for c in t.configs})
    except TopicError as exc:
        out.error, out.message = exc.error, exc.message
        return out
    out.partitions, out.replication, out.configs = partitions, replication, configs
    if not validate_only:
        try:
            out.topic_id = (await broker.admin_create_topic(
                t.name, partitions, configs, replication, assignments)).topic_id
        except TopicError as exc:
            return Created(t.name, exc.error, exc.message)
    return out


def _result(m: Any, broker: Broker, c: Created) -> Any:
    configs: tuple[Any, ...] = ()
    if c.error == OK and not c.describable:
        return make(m.CreatableTopicResult, name=c.name, topic_id=c.topic_id, error_code=OK,
                    error_message=None,
                    topic_config_error_code=ErrorCode.topic_authorization_failed,
                    num_partitions=-1, replication_factor=-1, configs=())
    if c.error == OK and has_field(m.CreatableTopicResult, "configs"):  # v5+
        configs = tuple(
            make(m.CreatableTopicConfigs, name=e.name, value=e.value, read_only=e.read_only,
                 config_source=int(e.source), is_sensitive=e.sensitive)
            for e in topic_entries(broker, c.configs))
    return make(m.CreatableTopicResult, name=c.name, topic_id=c.topic_id, error_code=c.error,
                error_message=err_message(c.error, c.message), topic_config_error_code=0,
                num_partitions=c.partitions, replication_factor=c.replication, configs=configs)


async def handle(ctx: RequestContext, req: CreateTopicsRequest) -> Any:
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    counts = Counter(t.name for t in req.topics)
    single = [t.name for t in req.topics if counts[t.name] == 1]
    refused: frozenset[str] = frozenset()
    if not ctx.authorized(Operation.CREATE, CLUSTER, audit=False):
        refused = await denied_in_slices(ctx, Operation.CREATE, ResourceType.TOPIC, single)
    hidden = await denied_in_slices(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, single,
                                    audit=False)

    async def one(t: Any) -> Created | None:
        if counts[t.name] != 1:
            return None
        if t.name in refused:
            return Created(t.name, ErrorCode.topic_authorization_failed, refusal(
                ctx.principal, Operation.CREATE, Resource(ResourceType.TOPIC, t.name)))
        created = await create_one(broker, t, req.validate_only)
        created.describable = t.name not in hidden
        return created

    # Duplicates last and once per name, as Kafka's controller answers them.
    duplicates = [Created(name, ErrorCode.invalid_request, "duplicate topic name")
                  for name, n in counts.items() if n > 1]
    results: list[Created] = []
    for i, t in enumerate(req.topics):
        if i and i % YIELD_EVERY == 0:  # many topics: the event loop is served between slices
            await asyncio.sleep(0)
        c = await one(t)
        if c is not None:
            results.append(c)
    results += duplicates
    if len(results) > YIELD_EVERY:
        answers = await in_slices(results, lambda c: _result(m, broker, c))
        return make(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(answers))
    return make(m.CreateTopicsResponse, throttle_time=NO_THROTTLE,
                topics=tuple(_result(m, broker, c) for c in results))
