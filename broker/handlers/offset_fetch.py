"""OffsetFetch (9) v1-9: a group's committed offsets (v8+: several groups in one request).

Offsets come from the committed view of the group's coordinator shard; partitions without a
committed offset answer offset -1. Topics None (v2+) asks for every committed partition. A share
group's id gets GROUP_ID_NOT_FOUND.

Authorization (``broker/authz.py``), as Kafka: DESCRIBE on the group, else
GROUP_AUTHORIZATION_FAILED for it; named topics need DESCRIBE (else TOPIC_AUTHORIZATION_FAILED per
partition); when all topics are asked, topics the principal may not DESCRIBE are left out (quiet).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from coordinator.group import classic as cl
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 9
VERSIONS = (1, 9)
BATCHED = 8


def _fetch(ctx: RequestContext, group_id: str,
           topics: Sequence[tuple[str, Sequence[int]]] | None
           ) -> tuple[ErrorCode, list[cl.FetchedOffset]]:
    if not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.GROUP, group_id)):
        return ErrorCode.group_authorization_failed, []
    if topics is None:
        res = ctx.broker.share_groups.fetch_offsets(group_id, None)
        names = {p.topic for p in res.partitions}
        hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, names, audit=False)
        return res.error_code, [p for p in res.partitions if p.topic not in hidden]
    denied = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, {t for t, _ in topics})
    res = ctx.broker.share_groups.fetch_offsets(
        group_id, [(t, ps) for t, ps in topics if t not in denied])
    if res.error_code != ErrorCode.none:
        return res.error_code, []
    found = {(p.topic, p.partition): p for p in res.partitions}
    out = []
    for t, ps in topics:
        for p in ps:
            if t in denied:
                out.append(cl.FetchedOffset(t, p, -1, -1, "",
                                            ErrorCode.topic_authorization_failed))
            else:
                out.append(found[(t, p)])
    return ErrorCode.none, out


def _topics(m: Any, tcls: str, pcls: str, parts: list[cl.FetchedOffset]) -> tuple[Any, ...]:
    by: dict[str, list[Any]] = {}
    for p in parts:
        by.setdefault(p.topic, []).append(make(
            getattr(m, pcls), partition_index=p.partition, committed_offset=p.offset,
            committed_leader_epoch=p.leader_epoch, metadata=p.metadata, error_code=p.error_code))
    return tuple(make(getattr(m, tcls), name=n, partitions=tuple(ps)) for n, ps in by.items())


def _asked(topics: Any) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in topics]


def handle(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if ctx.api_version >= BATCHED:
        groups = []
        for g in req.groups:
            error, parts = _fetch(ctx, g.group_id, _asked(g.topics))
            groups.append(make(m.OffsetFetchResponseGroup, group_id=g.group_id,
                               topics=_topics(m, "OffsetFetchResponseTopics",
                                              "OffsetFetchResponsePartitions", parts),
                               error_code=error))
        return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error, parts = _fetch(ctx, req.group_id, _asked(req.topics))
    if ctx.api_version < 2 and error != ErrorCode.none:
        # v1 has no top-level error: the error goes on each asked partition.
        parts = [cl.FetchedOffset(t, p, -1, -1, "", error)
                 for t, ps in (_asked(req.topics) or []) for p in ps]
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=error,
                topics=_topics(m, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition",
                               parts))
