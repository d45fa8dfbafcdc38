"""DeleteShareGroupOffsets (92) v0: delete a share group's offsets of whole topics.

The group must exist (GROUP_ID_NOT_FOUND) and be Empty (NON_EMPTY_GROUP), both top level. Per
topic: an unknown topic, or one the group holds no share state for, is
UNKNOWN_TOPIC_OR_PARTITION; otherwise every partition's share state is deleted and the topic is
dropped from the group's state metadata (``broker/share/admin.py``), so a later subscription
starts from ``share.auto.offset.reset`` again.

Authorization (``broker/authz.py``), as Kafka: DELETE on the group, else a top-level
GROUP_AUTHORIZATION_FAILED; READ on each topic, else TOPIC_AUTHORIZATION_FAILED for that topic,
whose offsets are kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.share.admin import DeleteOffsetsResult, ShareAdmin, TopicDeleteResult
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DeleteShareGroupOffsetsRequest

API_KEY = 92
VERSIONS = (0, 0)


def handle(ctx: RequestContext, req: DeleteShareGroupOffsetsRequest) -> Any:
    return _delete(ctx, req)


async def _delete(ctx: RequestContext, req: DeleteShareGroupOffsetsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    group = Resource(ResourceType.GROUP, req.group_id)
    if not ctx.authorized(Operation.DELETE, group):
        res = DeleteOffsetsResult(ErrorCode.group_authorization_failed,
                                  refusal(ctx.principal, Operation.DELETE, group))
    else:
        denied = ctx.denied(Operation.READ, ResourceType.TOPIC,
                            (t.topic_name for t in req.topics))
        res = await ShareAdmin.of(ctx.broker).delete_offsets(
            req.group_id, [t.topic_name for t in req.topics if t.topic_name not in denied])
        if denied and res.error == ErrorCode.none:
            refused = tuple(
                TopicDeleteResult(name, None, ErrorCode.topic_authorization_failed,
                                  refusal(ctx.principal, Operation.READ,
                                          Resource(ResourceType.TOPIC, name)))
                for name in dict.fromkeys(t.topic_name for t in req.topics) if name in denied)
            res = DeleteOffsetsResult(topics=refused + res.topics)
    return make(m.DeleteShareGroupOffsetsResponse, throttle_time=NO_THROTTLE,
                error_code=res.error, error_message=err_message(res.error, res.error_message),
                responses=tuple(
                    make(m.DeleteShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                         topic_id=t.topic_id, error_code=t.error,
                         error_message=err_message(t.error, t.error_message))
                    for t in res.topics))
