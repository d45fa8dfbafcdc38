"""OffsetFetch (9) v1-10: a group's committed offsets (v8+: several groups in one request; v10:
topics by id, UNKNOWN_TOPIC_ID for an unknown one).

A consumer-protocol (KIP-848) group checks the v9+ member id and epoch as Kafka's
``ConsumerGroup.validateOffsetFetch``: without a member id and with epoch -1 anyone may fetch;
otherwise UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH for the group.

Offsets come from the committed view of the group's coordinator shard; partitions without a
committed offset answer offset -1. Topics None (v2+) asks for every committed partition. A share
group's id gets GROUP_ID_NOT_FOUND. With RequireStable (v7+; read_committed consumers set it) a
partition with a pending transactional offset (TxnOffsetCommit whose transaction has not ended)
answers UNSTABLE_OFFSET_COMMIT and the client retries, as Kafka does.

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
from broker.wire_limits import YIELD_EVERY, in_slices
from coordinator.group import offsets as off
from protocol.codec import response_module
from protocol.messages import make

API_KEY = 9
VERSIONS = (1, 10)
BATCHED = 8
TOPIC_IDS = 10  # v10 names topics by id (KIP-848)


def _fetch(ctx: RequestContext, group_id: str,
           topics: Sequence[tuple[str, Sequence[int]]] | None,
           member_id: str | None = None, member_epoch: int = -1, stable: bool = False
           ) -> tuple[ErrorCode, list[off.FetchedOffset]]:
    if not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.GROUP, group_id)):
        return ErrorCode.group_authorization_failed, []
    service = ctx.broker.share_groups
    if topics is None:
        res = service.fetch_offsets(group_id, None, member_id, member_epoch, stable)
        names = {p.topic for p in res.partitions}
        hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, names, audit=False)
        return res.error_code, [p for p in res.partitions if p.topic not in hidden]
    denied = ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, {t for t, _ in topics})
    res = service.fetch_offsets(
        group_id, [(t, ps) for t, ps in topics if t not in denied], member_id, member_epoch,
        stable)
    if res.error_code != ErrorCode.none:
        return res.error_code, []
    found = {(p.topic, p.partition): p for p in res.partitions}
    out = []
    for t, ps in topics:
        for p in ps:
            if t in denied:
                out.append(off.FetchedOffset(t, p, -1, -1, "",
                                            ErrorCode.topic_authorization_failed))
            else:
                out.append(found[(t, p)])
    return ErrorCode.none, out


def _topics(ctx: RequestContext, m: Any, tcls: str, pcls: str, parts: list[off.FetchedOffset],
            ids: dict[str, Any] | None = None) -> tuple[Any, ...]:
    by: dict[str, list[Any]] = {}
    for p in parts:
        by.setdefault(p.topic, []).append(make(
            getattr(m, pcls), partition_index=p.partition, committed_offset=p.offset,
            committed_leader_epoch=p.leader_epoch, metadata=p.metadata, error_code=p.error_code))
    if ids is None:
        return tuple(make(getattr(m, tcls), name=n, partitions=tuple(ps)) for n, ps in by.items())
    out = []
    for n, ps in by.items():
        tid = ids.get(n)
        if tid is None:
            topic = ctx.broker.topics.get(n)
            if topic is None:
                continue  # a deleted topic has no id to answer with
            tid = topic.topic_id
        out.append(make(getattr(m, tcls), topic_id=tid, partitions=tuple(ps)))
    return tuple(out)


def _asked(ctx: RequestContext, topics: Any, by_id: bool
           ) -> tuple[list[tuple[str, list[int]]] | None, dict[str, Any], list[off.FetchedOffset]]:
    """(name, partitions) asked, the ids of the names (v10), and UNKNOWN_TOPIC_ID answers."""
    if topics is None:
        return None, {}, []
    if not by_id:
        return [(t.name, list(t.partition_indexes)) for t in topics], {}, []
    asked, ids, unknown = [], {}, []
    for t in topics:
        topic = ctx.broker.topics.by_id(t.topic_id)
        if topic is None:
            name = str(t.topic_id)
            ids[name] = t.topic_id
            unknown += [off.FetchedOffset(name, p, -1, -1, "", ErrorCode.unknown_topic_id)
                        for p in t.partition_indexes]
            continue
        ids[topic.name] = t.topic_id
        asked.append((topic.name, list(t.partition_indexes)))
    return asked, ids, unknown


def handle(ctx: RequestContext, req: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    by_id = ctx.api_version >= TOPIC_IDS
    stable = bool(getattr(req, "require_stable", False))
    if ctx.api_version >= BATCHED:

        def group(g: Any) -> Any:
            asked, ids, unknown = _asked(ctx, g.topics, by_id)
            error, parts = _fetch(ctx, g.group_id, asked, getattr(g, "member_id", None),
                                  getattr(g, "member_epoch", -1), stable)
            if error == ErrorCode.none:
                parts += unknown
            return make(m.OffsetFetchResponseGroup, group_id=g.group_id,
                        topics=_topics(ctx, m, "OffsetFetchResponseTopics",
                                       "OffsetFetchResponsePartitions", parts,
                                       ids if by_id else None),
                        error_code=error)

        if len(req.groups) > YIELD_EVERY:
            return _in_slices(m, req.groups, group)
        return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE,
                    groups=tuple(group(g) for g in req.groups))
    asked, _, _ = _asked(ctx, req.topics, False)
    error, parts = _fetch(ctx, req.group_id, asked, stable=stable)
    if ctx.api_version < 2 and error != ErrorCode.none:
        # v1 has no top-level error: the error goes on each asked partition.
        parts = [off.FetchedOffset(t, p, -1, -1, "", error)
                 for t, ps in (asked or []) for p in ps]
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=error,
                topics=_topics(ctx, m, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition",
                               parts))


async def _in_slices(m: Any, groups: Any, group: Any) -> Any:
    """Many groups: answered a slice at a time, the event loop served in between."""
    answered = await in_slices(groups, group)
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(answered))
