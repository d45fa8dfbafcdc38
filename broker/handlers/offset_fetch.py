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
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, Steps, denied_steps, run_steps, run_steps_async
from coordinator.group import offsets as off
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import (
        OffsetFetchRequest,
        OffsetFetchRequestV1,
        OffsetFetchRequestV2,
        OffsetFetchRequestV3,
        OffsetFetchRequestV4,
        OffsetFetchRequestV5,
        OffsetFetchRequestV6,
        OffsetFetchRequestV7,
        OffsetFetchRequestV8,
        OffsetFetchRequestV9,
        OffsetFetchRequestV10,
    )

    Single: TypeAlias = (OffsetFetchRequestV1 | OffsetFetchRequestV2 | OffsetFetchRequestV3
                         | OffsetFetchRequestV4 | OffsetFetchRequestV5 | OffsetFetchRequestV6
                         | OffsetFetchRequestV7)
    Batched: TypeAlias = OffsetFetchRequestV8 | OffsetFetchRequestV9 | OffsetFetchRequestV10

API_KEY = 9
VERSIONS = (1, 10)
BATCHED = 8
TOPIC_IDS = 10  # v10 names topics by id (KIP-848)


def _runs(topics: list[tuple[str, Sequence[int]]]) -> list[list[tuple[str, Sequence[int]]]]:
    """``topics`` cut into runs of at most about ``YIELD_EVERY`` partitions (always one run)."""
    out: list[list[tuple[str, Sequence[int]]]] = []
    run: list[tuple[str, Sequence[int]]] = []
    size = 0
    for t, ps in topics:
        for i in range(0, max(len(ps), 1), YIELD_EVERY):
            piece = ps[i:i + YIELD_EVERY]
            run.append((t, piece))
            size += max(len(piece), 1)
            if size >= YIELD_EVERY:
                out.append(run)
                run, size = [], 0
    if run or not out:
        out.append(run)
    return out


def _fetch(ctx: RequestContext, group_id: str,
           topics: Sequence[tuple[str, Sequence[int]]] | None,
           member_id: str | None = None, member_epoch: int = -1, stable: bool = False
           ) -> Steps[tuple[ErrorCode, list[off.FetchedOffset]]]:
    if not ctx.authorized(Operation.DESCRIBE, Resource(ResourceType.GROUP, group_id)):
        return ErrorCode.group_authorization_failed, []
    service = ctx.broker.share_groups
    if topics is None:
        res = service.fetch_offsets(group_id, None, member_id, member_epoch, stable)
        names = {p.topic for p in res.partitions}
        hidden = yield from denied_steps(ctx, Operation.DESCRIBE, ResourceType.TOPIC, names,
                                         audit=False)
        return res.error_code, [p for p in res.partitions if p.topic not in hidden]
    denied = yield from denied_steps(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                     (t for t, _ in topics))
    found: dict[tuple[str, int], off.FetchedOffset] = {}
    runs = _runs([(t, ps) for t, ps in topics if t not in denied])
    for i, run in enumerate(runs):  # one run unless the group is asked for very many
        if i:
            yield
        res = service.fetch_offsets(group_id, run, member_id, member_epoch, stable)
        if res.error_code != ErrorCode.none:
            return res.error_code, []
        found.update(((p.topic, p.partition), p) for p in res.partitions)
    out = []
    n = 0
    for t, ps in topics:
        for p in ps:
            n += 1
            if n % YIELD_EVERY == 0:
                yield
            if t in denied:
                out.append(off.FetchedOffset(t, p, -1, -1, "",
                                            ErrorCode.topic_authorization_failed))
            else:
                out.append(found[(t, p)])
    return ErrorCode.none, out


def _topics(ctx: RequestContext, m: Any, tcls: str, pcls: str, parts: list[off.FetchedOffset],
            ids: dict[str, Any] | None = None) -> Steps[tuple[Any, ...]]:
    by: dict[str, list[Any]] = {}
    for i, p in enumerate(parts):
        if i and i % YIELD_EVERY == 0:
            yield
        by.setdefault(p.topic, []).append(make(
            getattr(m, pcls), partition_index=p.partition, committed_offset=p.offset,
            committed_leader_epoch=p.leader_epoch, metadata=p.metadata, error_code=p.error_code))
    out = []
    for i, (n, ps) in enumerate(by.items()):
        if i and i % YIELD_EVERY == 0:
            yield
        if ids is None:
            out.append(make(getattr(m, tcls), name=n, partitions=tuple(ps)))
            continue
        tid = ids.get(n)
        if tid is None:
            topic = ctx.broker.topics.get(n)
            if topic is None:
                continue  # a deleted topic has no id to answer with
            tid = topic.topic_id
        out.append(make(getattr(m, tcls), topic_id=tid, partitions=tuple(ps)))
    return tuple(out)


def _asked(ctx: RequestContext, topics: Any, by_id: bool
           ) -> Steps[tuple[list[tuple[str, list[int]]] | None, dict[str, Any],
                            list[off.FetchedOffset]]]:
    """(name, partitions) asked, the ids of the names (v10), and UNKNOWN_TOPIC_ID answers."""
    if topics is None:
        return None, {}, []
    if not by_id:
        return [(t.name, list(t.partition_indexes)) for t in topics], {}, []
    asked, ids, unknown = [], {}, []
    for i, t in enumerate(topics):
        if i and i % YIELD_EVERY == 0:
            yield
        topic = ctx.broker.topics.by_id(t.topic_id)
        if topic is None:
            name = str(t.topic_id)
            ids[name] = t.topic_id
            parts = t.partition_indexes
            for j in range(0, len(parts), YIELD_EVERY):  # one topic may list 30,000 of them
                if j:
                    yield
                unknown += [off.FetchedOffset(name, p, -1, -1, "", ErrorCode.unknown_topic_id)
                            for p in parts[j:j + YIELD_EVERY]]
            continue
        ids[topic.name] = t.topic_id
        asked.append((topic.name, list(t.partition_indexes)))
    return asked, ids, unknown


def _group(ctx: RequestContext, m: Any, g: Any, by_id: bool, stable: bool) -> Steps[Any]:
    """One group's answer (v8+)."""
    asked, ids, unknown = yield from _asked(ctx, g.topics, by_id)
    error, parts = yield from _fetch(ctx, g.group_id, asked, getattr(g, "member_id", None),
                                     getattr(g, "member_epoch", -1), stable)
    if error == ErrorCode.none:
        parts += unknown
    topics = yield from _topics(ctx, m, "OffsetFetchResponseTopics",
                                "OffsetFetchResponsePartitions", parts, ids if by_id else None)
    return make(m.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics,
                error_code=error)


def _batched(ctx: RequestContext, m: Any, req: Batched) -> Steps[Any]:
    by_id = ctx.api_version >= TOPIC_IDS
    stable = bool(getattr(req, "require_stable", False))
    groups = []
    for i, g in enumerate(req.groups):
        if i and i % YIELD_EVERY == 0:
            yield
        groups.append((yield from _group(ctx, m, g, by_id, stable)))
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _single(ctx: RequestContext, m: Any, req: Single) -> Steps[Any]:
    """v1-7: one group."""
    stable = bool(getattr(req, "require_stable", False))
    asked, _, _ = yield from _asked(ctx, req.topics, False)
    error, parts = yield from _fetch(ctx, req.group_id, asked, stable=stable)
    if ctx.api_version < 2 and error != ErrorCode.none:
        # v1 has no top-level error: the error goes on each asked partition.
        parts = [off.FetchedOffset(t, p, -1, -1, "", error)
                 for t, ps in (asked or []) for p in ps]
    topics = yield from _topics(ctx, m, "OffsetFetchResponseTopic",
                                "OffsetFetchResponsePartition", parts)
    return make(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=error,
                topics=topics)


def _size(topics: Any) -> int:
    return 0 if topics is None else sum(1 + len(t.partition_indexes) for t in topics)


def handle(ctx: RequestContext, req: OffsetFetchRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if ctx.api_version >= BATCHED:
        batched = cast("Batched", req)
        steps = _batched(ctx, m, batched)
        large = len(batched.groups) > YIELD_EVERY or \
            sum(_size(g.topics) for g in batched.groups) > YIELD_EVERY
    else:
        single = cast("Single", req)
        steps = _single(ctx, m, single)
        large = _size(single.topics) > YIELD_EVERY
    # A large request hands the event loop back every YIELD_EVERY elements (issue 25); an
    # ordinary one is answered straight through.
    return run_steps_async(steps) if large else run_steps(steps)
