"""What the five share-state RPC handlers (83-87) share: flattening and regrouping.

Each request is ``group_id`` plus topics (topic id + partitions). A handler turns every partition
entry into persister params, the share coordinator service answers the whole list at once (split
per ``__share_group_state`` partition, one append per partition), and the replies are regrouped
under their topics in request order.

Checks made here, before the service: the RPCs are inter-broker only, authorized as CLUSTER_ACTION
on the cluster (broker/authz.py): a principal the authorizer refuses gets
CLUSTER_AUTHORIZATION_FAILED on every entry and nothing is read or written. Then an empty group id or a missing (zero) topic id answers
INVALID_REQUEST for the entries concerned. Everything else (negative partition, unknown topic or
partition, fencing, uninitialized state) is the shard's to answer.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, cluster_action_refusal
from broker.context import RequestContext
from broker.wire_limits import YIELD_EVERY
from coordinator.share.runtime_service import ShareCoordinatorService
from persister.api import SharePartitionKey

P = TypeVar("P")
Res = TypeVar("Res")

TopicReplies = list[tuple[uuid.UUID | None, list[tuple[int, Res]]]]


def service(ctx: RequestContext) -> ShareCoordinatorService:
    svc: ShareCoordinatorService = ctx.broker.share_coordinator
    return svc


def _problem(group_id: str, topic_id: uuid.UUID | None) -> str | None:
    if not group_id:
        return "The group id must not be empty."
    if topic_id is None:
        return "The topic id must be set."
    return None


async def answer(
    ctx: RequestContext,
    req: Any,
    to_params: Callable[[SharePartitionKey, Any], P],
    call: Callable[[Sequence[P]], Awaitable[list[Res]]],
    invalid: Callable[[ErrorCode, str], Res],
) -> TopicReplies[Res]:
    """Run one state RPC: ``to_params(key, partition entry)`` per entry, ``call`` once for all the
    valid ones, ``invalid(code, message)`` for the rest. Returns ``[(topic id, [(partition, reply)])]``."""
    if not ctx.authorized(Operation.CLUSTER_ACTION, CLUSTER):
        refused = cluster_action_refusal(ctx.principal)
        out: TopicReplies[Res] = []
        seen = 0
        for topic in req.topics:  # tens of thousands of entries: the loop served between
            rows: list[tuple[int, Res]] = []
            for p in topic.partitions:
                seen += 1
                if seen % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                rows.append((p.partition, invalid(ErrorCode.cluster_authorization_failed,
                                                  refused)))
            out.append((topic.topic_id, rows))
        return out
    params: list[P] = []
    # Per entry: (partition, index into params, or -1 with the reply already decided).
    layout: list[tuple[uuid.UUID | None, list[tuple[int, int, Res | None]]]] = []
    seen = 0
    for topic in req.topics:
        entries: list[tuple[int, int, Res | None]] = []
        problem = _problem(req.group_id, topic.topic_id)
        for p in topic.partitions:
            seen += 1
            if seen % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # tens of thousands of entries: serve the loop between
            if problem is not None:
                entries.append((p.partition, -1, invalid(ErrorCode.invalid_request, problem)))
                continue
            entries.append((p.partition, len(params), None))
            params.append(to_params(SharePartitionKey(req.group_id, topic.topic_id, p.partition), p))
        layout.append((topic.topic_id, entries))
    replies = await call(params) if params else []
    if seen >= YIELD_EVERY:  # a few entries (one per share-partition written): no loop turn
        await asyncio.sleep(0)
    out = []
    for i, (topic_id, entries) in enumerate(layout):
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
        rows = []
        for partition, slot, decided in entries:
            reply = replies[slot] if decided is None else decided
            rows.append((partition, reply))
        out.append((topic_id, rows))
    return out


async def results(replies: TopicReplies[Res], row: Callable[[int, Res], Any],
                  topic: Callable[[uuid.UUID | None, tuple[Any, ...]], Any]) -> tuple[Any, ...]:
    """The response's topic results: ``row(partition, reply)`` per entry, ``topic(topic id,
    rows)`` per topic, handing the event loop back every ``YIELD_EVERY`` entries (one topic may
    carry tens of thousands of partitions)."""
    out = []
    seen = 0
    for topic_id, rows in replies:
        built = []
        for partition, reply in rows:
            seen += 1
            if seen % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            built.append(row(partition, reply))
        seen += 1
        if seen % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        out.append(topic(topic_id, tuple(built)))
    return tuple(out)


def message(error: ErrorCode, text: str | None) -> str | None:
    """Only send an error message alongside an error."""
    return text if error != ErrorCode.none else None
