"""What ShareGroupDescribe (``share_group_describe.py``) and ConsumerGroupDescribe
(``consumer_group_describe.py``) share: authorize and describe each id (``_common.py``), refuse
the ids the principal may not DESCRIBE (GROUP_AUTHORIZATION_FAILED) and the groups assigned a
topic it may not DESCRIBE (TOPIC_AUTHORIZATION_FAILED, without members), answer the rest through
the handler's ``answer``, and serve the event loop between slices of a long id list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker.authz import OPERATIONS_NOT_REQUESTED, Operation, Resource, ResourceType, refusal
from broker.context import RequestContext
from broker.handlers._common import (
    NO_THROTTLE,
    describe_authorized,
    describe_authorized_in_slices,
)
from broker.wire_limits import YIELD_EVERY, in_slices
from protocol.codec import response_module
from protocol.messages import make

_D = TypeVar("_D")

# answer(response module, group id, description, operations): the group's entry; operations()
# is its authorized-operations bitfield (OPERATIONS_NOT_REQUESTED when the request does not ask).
Answer = Callable[[Any, str, _D, Callable[[], int]], Any]


def refused(m: Any, group_id: str, error: ErrorCode, message: str | None) -> Any:
    """A DescribedGroup entry that says only why the group is not described."""
    return make(m.DescribedGroup, error_code=error, error_message=message, group_id=group_id,
                group_state="", group_epoch=0, assignment_epoch=0, assignor_name="", members=(),
                authorized_operations=OPERATIONS_NOT_REQUESTED)


def describe_groups(ctx: RequestContext, api_key: int, response: str, group_ids: Sequence[str],
                    include_operations: bool, describe: Callable[[list[str]], Iterable[_D]],
                    assigned_topics: Callable[[_D], set[str]], answer: Answer[_D]) -> Any:
    """The ``response`` message (``ShareGroupDescribeResponse``...) for ``group_ids``, or an
    awaitable of it for more than ``YIELD_EVERY`` ids. ``answer(m, gid, d, operations)`` makes
    an authorized group's entry; ``operations()`` is the group's authorized-operations bitfield
    when the request asks for it, else ``OPERATIONS_NOT_REQUESTED``."""
    if len(group_ids) > YIELD_EVERY:  # many groups: the loop is served between slices
        return _many(ctx, api_key, response, group_ids, include_operations, describe,
                     assigned_topics, answer)
    found, hidden = describe_authorized(ctx, group_ids, describe, assigned_topics)
    return _respond(ctx, api_key, response, group_ids, include_operations, found, hidden,
                    assigned_topics, answer)


async def _many(ctx: RequestContext, api_key: int, response: str, group_ids: Sequence[str],
                include_operations: bool, describe: Callable[[list[str]], Iterable[_D]],
                assigned_topics: Callable[[_D], set[str]], answer: Answer[_D]) -> Any:
    found, hidden = await describe_authorized_in_slices(ctx, group_ids, describe,
                                                        assigned_topics)
    return await _respond(ctx, api_key, response, group_ids, include_operations, found, hidden,
                          assigned_topics, answer)


def _respond(ctx: RequestContext, api_key: int, response: str, group_ids: Sequence[str],
             include_operations: bool, found: dict[str, _D], hidden: frozenset[str],
             assigned_topics: Callable[[_D], set[str]], answer: Answer[_D]) -> Any:
    m = response_module(api_key, ctx.api_version)

    def one(gid: str) -> Any:
        d = found.get(gid)
        if d is None:
            return refused(m, gid, ErrorCode.group_authorization_failed, refusal(
                ctx.principal, Operation.DESCRIBE, Resource(ResourceType.GROUP, gid)))
        if hidden and assigned_topics(d) & hidden:
            return refused(m, gid, ErrorCode.topic_authorization_failed,
                           "the group is assigned topics that "
                           f"{ctx.principal} may not DESCRIBE")

        def operations() -> int:
            if not include_operations:
                return OPERATIONS_NOT_REQUESTED
            return ctx.authorized_operations(Resource(ResourceType.GROUP, gid))

        return answer(m, gid, d, operations)

    if len(group_ids) > YIELD_EVERY:  # many groups: the loop is served between slices
        return _in_slices(getattr(m, response), group_ids, one)
    return make(getattr(m, response), throttle_time=NO_THROTTLE,
                groups=tuple(one(gid) for gid in group_ids))


async def _in_slices(cls: Any, group_ids: Sequence[str], one: Callable[[str], Any]) -> Any:
    groups = await in_slices(group_ids, one)
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
