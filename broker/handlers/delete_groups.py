"""DeleteGroups (42) v0-2: delete share, classic and consumer-protocol groups.

A classic or consumer group with members answers NON_EMPTY_GROUP; deleting one removes its
committed offsets with it. Share groups as follows.

Only an Empty share group can be deleted (NON_EMPTY_GROUP otherwise); an unknown id answers
GROUP_ID_NOT_FOUND and an empty id INVALID_GROUP_ID. Deleting removes the group's durable share
state through the persister (first: if that fails the group stays, as in Kafka), then the group
itself and its group configs (``broker/share/admin.py``). The answer waits for all of it.
Authorization (``broker/authz.py``): DELETE on each group, else GROUP_AUTHORIZATION_FAILED for
it and nothing of it is touched (Kafka).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.share.admin import ShareAdmin
from broker.wire_limits import denied_in_slices, in_slices
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DeleteGroupsRequest

API_KEY = 42
VERSIONS = (0, 2)


def handle(ctx: RequestContext, req: DeleteGroupsRequest) -> Any:
    return _delete(ctx, req)


async def _delete(ctx: RequestContext, req: DeleteGroupsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    # Tens of thousands of names: authorized and answered a slice at a time (issue 25).
    denied = await denied_in_slices(ctx, Operation.DELETE, ResourceType.GROUP, req.groups_names)
    allowed = [g for g in req.groups_names if g not in denied]
    results = await ShareAdmin.of(ctx.broker).delete_groups(allowed) if allowed else []
    rows = await in_slices(results, lambda res: make(
        m.DeletableGroupResult, group_id=res.group_id, error_code=res.error,
        error_message=err_message(res.error, res.error_message)))
    rows += await in_slices([g for g in dict.fromkeys(req.groups_names) if g in denied],
                            lambda g: make(m.DeletableGroupResult, group_id=g,
                                           error_code=ErrorCode.group_authorization_failed,
                                           error_message=refusal(ctx.principal, Operation.DELETE,
                                                                 Resource(ResourceType.GROUP, g))))
    return make(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(rows))
