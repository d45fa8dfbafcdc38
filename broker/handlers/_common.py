"""Small helpers shared by handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.wire_limits import YIELD_EVERY, denied_in_slices

if TYPE_CHECKING:
    from broker.context import RequestContext

_D = TypeVar("_D")

NO_THROTTLE = timedelta(0)
OK = ErrorCode.none


def err_message(error: ErrorCode, message: str | None) -> str | None:
    """Only send an error message alongside an error."""
    return message if error != ErrorCode.none else None


def describe_authorized(ctx: RequestContext, group_ids: Sequence[str],
                        describe: Callable[[list[str]], Iterable[_D]],
                        assigned_topics: Callable[[_D], set[str]]
                        ) -> tuple[dict[str, _D], frozenset[str]]:
    """The group-describe RPCs' authorization, as Kafka's: the descriptions of the ids the
    principal may DESCRIBE (the others are absent: GROUP_AUTHORIZATION_FAILED), and, when an
    authorizer is on, the topics assigned in them that it may not DESCRIBE (a group assigned such
    a topic is refused with TOPIC_AUTHORIZATION_FAILED)."""
    wanted = [gid for gid in group_ids
              if ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.GROUP, gid))]
    found = dict(zip(wanted, describe(wanted), strict=True))
    hidden: frozenset[str] = frozenset()
    if ctx.broker.authorizer.enforcing:
        assigned = set().union(*(assigned_topics(d) for d in found.values()))
        hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, assigned, audit=False)
    return found, hidden


async def describe_authorized_in_slices(
        ctx: RequestContext, group_ids: Sequence[str],
        describe: Callable[[list[str]], Iterable[_D]],
        assigned_topics: Callable[[_D], set[str]]) -> tuple[dict[str, _D], frozenset[str]]:
    """``describe_authorized`` ``YIELD_EVERY`` group ids at a time, the event loop served in
    between (tens of thousands of ids, issue 25)."""
    found: dict[str, _D] = {}
    for i in range(0, len(group_ids), YIELD_EVERY):
        if i:
            await asyncio.sleep(0)
        wanted = [gid for gid in group_ids[i:i + YIELD_EVERY]
                  if ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.GROUP, gid))]
        found.update(zip(wanted, describe(wanted), strict=True))
    hidden: frozenset[str] = frozenset()
    if ctx.broker.authorizer.enforcing:
        assigned: set[str] = set()
        for i, d in enumerate(found.values()):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            assigned |= assigned_topics(d)
        hidden = await denied_in_slices(ctx, Operation.DESCRIBE, ResourceType.TOPIC, assigned,
                                        audit=False)
    return found, hidden
