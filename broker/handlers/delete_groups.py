"""DeleteGroups (42) v0-2: delete share groups.

Only an Empty share group can be deleted (NON_EMPTY_GROUP otherwise); an unknown id answers
GROUP_ID_NOT_FOUND and an empty id INVALID_GROUP_ID. Deleting removes the group's durable share
state through the persister (first: if that fails the group stays, as in Kafka), then the group
itself and its group configs (``broker/share_admin.py``). The answer waits for all of it.
"""

from __future__ import annotations

from typing import Any

from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, err_message
from broker.share_admin import ShareAdmin
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 42
VERSIONS = (0, 2)


def handle(ctx: RequestContext, req: Any) -> Any:
    return _delete(ctx, req)


async def _delete(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    results = await ShareAdmin.of(ctx.broker).delete_groups(list(req.groups_names))
    return make(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(m.DeletableGroupResult, group_id=res.group_id, error_code=res.error,
             error_message=err_message(res.error, res.error_message))
        for res in results))
