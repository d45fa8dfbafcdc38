"""DeleteTopics (20) v1-6: delete topics by name, or (v6) by name or topic id.

- ``delete.topic.enable=false``: every topic is answered TOPIC_DELETION_DISABLED (INVALID_REQUEST
  below v3, which predates that code), as Kafka's controller does.
- v6 entries must give exactly one of name and id (else INVALID_REQUEST); a name or id given
  twice, or a name whose id is also given -> INVALID_REQUEST, and that topic is not deleted.
- unknown name -> UNKNOWN_TOPIC_OR_PARTITION; unknown id -> UNKNOWN_TOPIC_ID.
- internal topics (``__consumer_offsets``, ``__share_group_state``) hold coordinator state that
  their coordinators keep open, so they are refused with the deletion-disabled code above.
  (Kafka's controller would delete them; Kafka's CLI refuses to. We refuse on the broker.)

Authorization (``broker/authz.py``), as Kafka's controller: DELETE on the cluster (asked quietly)
allows every topic; otherwise a name the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
whether or not it exists (an unknown name it may describe is UNKNOWN_TOPIC_OR_PARTITION), and a
topic it may not DELETE is TOPIC_AUTHORIZATION_FAILED; by id, an unknown id is UNKNOWN_TOPIC_ID
and a topic it may not delete TOPIC_AUTHORIZATION_FAILED, with the name only when describable.
Deletion being disabled is answered before any check, as Kafka does.

Deletion is immediate and durable before visible: the request's topics leave ``topics.json`` in
one write, then the registry, their partition directories are renamed aside and removed in a
worker thread (``LogManager.drop_topic``) and long polls on them are woken. A failed
write (or an offline log directory) answers KAFKA_STORAGE_ERROR for each and deletes none. v6 answers carry the topic id, v5+ an error message.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, OK, err_message
from broker.log.topics import Topic, TopicError
from broker.wire_limits import YIELD_EVERY, in_slices
from storage.log_dir import describe
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import (
        DeleteTopicsRequest,
        DeleteTopicsRequestV1,
        DeleteTopicsRequestV2,
        DeleteTopicsRequestV3,
        DeleteTopicsRequestV4,
        DeleteTopicsRequestV5,
        DeleteTopicsRequestV6,
    )

    DeleteTopicsRequestV1_5: TypeAlias = (DeleteTopicsRequestV1 | DeleteTopicsRequestV2
                                          | DeleteTopicsRequestV3 | DeleteTopicsRequestV4
                                          | DeleteTopicsRequestV5)

API_KEY = 20
VERSIONS = (1, 6)

log = logging.getLogger("shoal.topics")


@dataclass(frozen=True, slots=True)
class Deleted:
    name: str | None
    topic_id: uuid.UUID | None
    error: ErrorCode = OK
    message: str | None = None
    # Cluster mode: checked here, deleted through etcd by ``handle`` (an await).
    in_cluster: bool = False


def _id(value: uuid.UUID | None) -> uuid.UUID | None:
    """None for a missing or all-zero topic id."""
    return value if value is not None and value.int != 0 else None


def _disabled_code(version: int) -> ErrorCode:
    return ErrorCode.invalid_request if version < 3 else ErrorCode.topic_deletion_disabled


def _delete(broker: Broker, targets: list[Topic], version: int) -> list[Deleted]:
    """Delete ``targets`` together (one registry write); a storage error answers
    KAFKA_STORAGE_ERROR for each of them and deletes none."""
    out = [Deleted(t.name, t.topic_id, _disabled_code(version),
                   f"{t.name} is an internal topic and cannot be deleted")
           for t in targets if t.internal]
    doomed = [t for t in targets if not t.internal]
    if not doomed:
        return out
    if broker.member is not None:  # through etcd, by ``handle`` (an await)
        return out + [Deleted(t.name, t.topic_id, in_cluster=True) for t in doomed]
    try:
        broker.delete_topics([t.name for t in doomed])
    except OSError as exc:
        log.error("deleting %d topic(s) failed, none was deleted: %s", len(doomed),
                  describe(exc))
        return out + [Deleted(t.name, t.topic_id, ErrorCode.kafka_storage_error,
                              f"topic {t.name!r} was not deleted: {describe(exc)}; check the "
                              "data directory's disk, then retry") for t in doomed]
    return out + [Deleted(t.name, t.topic_id) for t in doomed]


def _anything(name: str, operation: Operation) -> str | None:
    return None


def delete_topics(broker: Broker, refs: list[tuple[str | None, uuid.UUID | None]],
                  version: int, refused: Callable[[str, Operation], str | None] = _anything
                  ) -> list[Deleted]:
    """Delete the topics named by (name, id) references; one result per distinct reference.
    ``refused(name, operation)``: why the caller may not do ``operation`` (DESCRIBE, DELETE) on
    topic ``name``, or None."""
    if not broker.config.get("delete.topic.enable"):
        return [Deleted(n, i, _disabled_code(version),
                        "topic deletion is disabled (delete.topic.enable=false)")
                for n, i in dict.fromkeys(refs)]
    names = Counter(n for n, i in refs if n is not None and i is None)
    ids = Counter(i for n, i in refs if i is not None and n is None)
    out: list[Deleted] = []
    targets: dict[uuid.UUID, Topic] = {}  # by id: a name given with its id is one lookup
    claimed: set[uuid.UUID] = set()
    for name, topic_id in refs:
        if name is not None and topic_id is not None:
            out.append(Deleted(name, topic_id, ErrorCode.invalid_request,
                               "give a topic name or a topic id, not both"))
        elif name is None and topic_id is None:
            out.append(Deleted(None, None, ErrorCode.invalid_request,
                               "neither a topic name nor a topic id was given"))
    for topic_id, n in ids.items():
        if n > 1:
            out.append(Deleted(None, topic_id, ErrorCode.invalid_request, "duplicate topic id"))
            claimed.add(topic_id)
            continue
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            out.append(Deleted(None, topic_id, ErrorCode.unknown_topic_id,
                               f"no topic has id {topic_id}"))
        elif (why := refused(topic.name, Operation.DELETE)) is not None:
            shown = topic.name if refused(topic.name, Operation.DESCRIBE) is None else None
            out.append(Deleted(shown, topic_id, ErrorCode.topic_authorization_failed,
                               why if shown else "not authorized to delete this topic"))
            claimed.add(topic_id)
        else:
            targets[topic_id] = topic
            claimed.add(topic_id)
    for name, n in names.items():
        if n > 1:
            out.append(Deleted(name, None, ErrorCode.invalid_request, "duplicate topic name"))
            continue
        if (why := refused(name, Operation.DESCRIBE)) is not None:
            out.append(Deleted(name, None, ErrorCode.topic_authorization_failed, why))
            continue
        topic = broker.topics.get(name)
        if topic is None:
            out.append(Deleted(name, None, ErrorCode.unknown_topic_or_partition,
                               f"topic {name!r} does not exist"))
        elif (why := refused(name, Operation.DELETE)) is not None:
            out.append(Deleted(name, None, ErrorCode.topic_authorization_failed, why))
        elif topic.topic_id in claimed:
            out.append(Deleted(name, topic.topic_id, ErrorCode.invalid_request,
                               "this topic's id was also given in the request"))
            if targets.pop(topic.topic_id, None) is not None:
                out.append(Deleted(None, topic.topic_id, ErrorCode.invalid_request,
                                   "this topic's name was also given in the request"))
        else:
            targets[topic.topic_id] = topic
    out.extend(_delete(broker, list(targets.values()), version))
    return out


def handle(ctx: RequestContext, req: DeleteTopicsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    refs: list[tuple[str | None, uuid.UUID | None]]
    if ctx.api_version >= 6:
        refs = [(t.name, _id(t.topic_id)) for t in cast("DeleteTopicsRequestV6", req).topics]
    else:
        refs = [(n, None) for n in cast("DeleteTopicsRequestV1_5", req).topic_names]
    all_allowed = ctx.authorized(Operation.DELETE, CLUSTER, audit=False)
    answers: dict[tuple[str, Operation], str | None] = {}

    def refused(name: str, operation: Operation) -> str | None:
        if all_allowed:
            return None
        key = (name, operation)
        if key not in answers:  # each (topic, operation) asked once
            resource = Resource(ResourceType.TOPIC, name)
            answers[key] = None if ctx.authorized(operation, resource) \
                else refusal(ctx.principal, operation, resource)
        return answers[key]

    deleted = delete_topics(ctx.broker, refs, ctx.api_version, refused)

    def result(d: Deleted) -> Any:
        return make(m.DeletableTopicResult, name=d.name, topic_id=d.topic_id, error_code=d.error,
                    error_message=err_message(d.error, d.message))

    def response() -> Any:
        results = tuple(result(d) for d in deleted)
        return make(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=results)

    async def response_in_slices() -> Any:  # many topics: the loop is served between slices
        results = tuple(await in_slices(deleted, result))
        return make(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=results)

    if not any(d.in_cluster for d in deleted):
        return response_in_slices() if len(deleted) > YIELD_EVERY else response()

    async def in_cluster() -> Any:
        for i, d in enumerate(deleted):
            if d.in_cluster and d.name is not None:
                try:
                    await ctx.broker.admin_delete_topic(d.name)
                except TopicError as exc:  # Deleted is frozen: the result is replaced
                    deleted[i] = replace(d, error=exc.error, message=exc.message)
        return response()

    return in_cluster()
