"""ShareAcknowledge (79) v1-2: acknowledge records of a share session without fetching.

Epoch 0 is INVALID_SHARE_SESSION_EPOCH (a session is opened by ShareFetch); a missing session is
SHARE_SESSION_NOT_FOUND; a wrong epoch INVALID_SHARE_SESSION_EPOCH. Success increments the
session's epoch (the same counter ShareFetch uses). Epoch -1 acknowledges, then closes the session
and releases the member's remaining records. Each partition's result is answered only after its
state write completed. v2 carries IsRenewAck and returns AcquisitionLockTimeoutMs.

Authorization (``broker/authz.py``), as Kafka: a null or empty GroupId is INVALID_REQUEST before
anything else; then READ on the group, else the top-level
GROUP_AUTHORIZATION_FAILED and the session is untouched; READ on each acknowledged topic (asked
once per topic), else TOPIC_AUTHORIZATION_FAILED for its partitions, whose acknowledgements are
not applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.broker_metrics import counted
from broker.context import RequestContext
from broker.handlers._routing import LeaderNotes
from broker.handlers.share_fetch import max_session_partitions
from broker.share.service import ShareService, request_problem, top_level
from protocol.codec import response_module

if TYPE_CHECKING:
    from broker.handlers._requests import ShareAcknowledgeRequest

API_KEY = 79
VERSIONS = (1, 2)


def handle(ctx: RequestContext, req: ShareAcknowledgeRequest) -> Any:
    metrics = ctx.broker.metrics
    return counted(_share_acknowledge, ctx, req, metrics.share_ack_requests, metrics.share_ack_failed)


def request_limit(config: Any) -> tuple[tuple[tuple[str, ...], ...], int]:
    """A ShareAcknowledge cannot name more partitions than a share session may hold."""
    return (("topics", "partitions"),), max_session_partitions(config)


def refuse_over_limit(ctx: RequestContext, count: int, most: int) -> Any:
    """INVALID_REQUEST for an acknowledgement of more partitions than any session holds; its
    body is never decoded (broker/wire_limits.py)."""
    m = response_module(API_KEY, ctx.api_version)
    lock_ms = ctx.broker.config.get("group.share.record.lock.duration.ms")
    return top_level(m.ShareAcknowledgeResponse, lock_ms)(
        ErrorCode.invalid_request,
        f"the request acknowledges {count} partitions; a share session holds at most {most} "
        "(group.share.max.session.partitions)")


async def _share_acknowledge(ctx: RequestContext, req: ShareAcknowledgeRequest) -> Any:
    svc: ShareService = ctx.broker.shares
    m = response_module(API_KEY, ctx.api_version)
    group, member = req.group_id, req.member_id
    lock_ms = svc.partitions.lock_duration_ms(group) if group else 0

    top = top_level(m.ShareAcknowledgeResponse, lock_ms)

    if not group:
        # Before authorization, as Kafka: a null id is no resource name to match ACLs against.
        return top(ErrorCode.invalid_request, request_problem(group, member))
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, group)):
        return top(ErrorCode.group_authorization_failed, refusal(
            ctx.principal, Operation.READ, Resource(ResourceType.GROUP, group)))
    problem = request_problem(group, member)
    if problem:
        return top(ErrorCode.invalid_request, problem)
    epoch = req.share_session_epoch
    if epoch == 0:
        return top(ErrorCode.invalid_share_session_epoch,
                   "ShareAcknowledge cannot open a share session (use ShareFetch with epoch 0)")
    error, session = svc.sessions.check(group, member, epoch)
    if error != ErrorCode.none or session is None:
        return top(error)
    if epoch != -1:
        session.bump()
    is_renew = bool(getattr(req, "is_renew_ack", False))
    acks = await svc.acknowledge_all(group, member, req.topics, ctx.api_version, is_renew,
                                     _refused_topics(ctx, req.topics))
    if epoch == -1:
        svc.sessions.close(group, member)
        svc.release_session(session)
        ctx.broker.logs.watch.notify(("share-session-freed",))
    notes = LeaderNotes(ctx, m)
    by_topic: dict[Any, list[Any]] = {}
    for (topic_id, p), ack in acks.items():
        by_topic.setdefault(topic_id, []).append(m.PartitionData(  # same fields in v1 and v2
            partition_index=p, error_code=ack.error,
            error_message=ack.message if ack.error != ErrorCode.none else None,
            current_leader=notes.leader(topic_id, p, ack.error)))
    return top(ErrorCode.none, None, tuple(
        m.ShareAcknowledgeTopicResponse(topic_id=t, partitions=tuple(ps))
        for t, ps in by_topic.items()), notes.endpoints())


def _refused_topics(ctx: RequestContext, topics: Any) -> frozenset[Any]:
    """Ids of the acknowledged topics the principal may not READ (each asked once by name)."""
    if not ctx.broker.authorizer.enforcing:
        return frozenset()
    registry = ctx.broker.topics
    names = {t.topic_id: topic.name for t in topics
             if (topic := registry.by_id(t.topic_id)) is not None}
    denied = ctx.denied(Operation.READ, ResourceType.TOPIC, names.values())
    return frozenset(tid for tid, name in names.items() if name in denied) if denied \
        else frozenset()
