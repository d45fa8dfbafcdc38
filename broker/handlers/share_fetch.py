"""ShareFetch (78) v1-2: share-session epochs, piggybacked acknowledgements, acquisition, long poll.

Follows reference section 4. Epoch 0 opens (or replaces) the member's share session and must not
carry acknowledgements; epoch n continues it; -1 applies acknowledgements, closes the session and
releases the member's records. Acknowledgements are applied first (each answered only after its
state write), then records are acquired from the session's partitions in rotated order, sharing
one MaxRecords budget. With nothing acquired, the request waits up to MaxWaitMs, woken by produce
and by records becoming available again (release, lock expiry). Responses carry the log's own
batches covering the acquired ranges plus the AcquiredRecords list; the client ignores offsets
not listed. MinBytes is honoured with MaxWaitMs, as Kafka's share fetch purgatory does: while
fewer than MinBytes bytes were acquired (and MaxRecords / MaxBytes are not used up) the request
keeps waiting, and acquires more as records arrive, until MaxWaitMs; then it answers with what
it has. Records acquired early in that wait stay acquired (their lock runs) until the answer. v2 adds ShareAcquireMode (record_limit) and IsRenewAck (acknowledge only, no fetch).

Bounds (issue 12): a partition of a topic that does not exist (or a partition number the topic does
not have) never enters the session; it is answered UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION in
this response only, as Kafka answers it. A session holds at most
``group.share.max.session.partitions`` partitions (a Shoal extension; Kafka has no such bound).
A request that would take the session past it, or that lists more partitions than that at all, is
answered with the top-level SHARE_SESSION_LIMIT_REACHED, the error Kafka gives when a share session
cannot be held (there for the session count), and the session is left as it was; the latter
kind is refused before its body is decoded (``request_limit``, broker/wire_limits.py).

Authorization (``broker/authz.py``), as Kafka: a null or empty GroupId is INVALID_REQUEST before
anything else; then READ on the group, else the top-level
GROUP_AUTHORIZATION_FAILED and nothing else happens. Then READ on every topic of the session and
of the request, asked once per topic and request (``_refused_topics``): a partition of a topic the
principal may not read stays in the session (as in Kafka, so it is served once READ is granted)
but is answered TOPIC_AUTHORIZATION_FAILED, nothing is acquired from it, and acknowledgements for
it are not applied (acknowledge error TOPIC_AUTHORIZATION_FAILED). With authorization off none of
this costs more than one attribute test per request.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.broker_metrics import counted
from broker.context import RequestContext
from broker.handlers._routing import LeaderNotes, leader_problem
from broker.log.watch import wait_for_any
from broker.share.acquisition import AcquireMode
from broker.share.partition import SharePartition
from broker.share.partition_manager import UNSURE, share_watch_key
from broker.share.service import AckResult, ShareService, request_problem, top_level
from persister.api import SharePartitionKey
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop
from protocol.codec import response_module
from protocol.record_batch import CorruptRecordError, iter_batches

if TYPE_CHECKING:
    from broker.handlers._requests import ShareFetchRequest

API_KEY = 78
VERSIONS = (1, 2)


def handle(ctx: RequestContext, req: ShareFetchRequest) -> Any:
    metrics = ctx.broker.metrics
    return _encode_wide_off_loop(counted(_share_fetch, ctx, req, metrics.share_fetch_requests,
                                         metrics.share_fetch_failed))


async def _encode_wide_off_loop(answer: Any) -> Any:
    """A response over many partitions is encoded in a worker thread (broker/wire_limits.py)."""
    resp = await answer
    if sum(len(t.partitions) for t in resp.responses) > YIELD_EVERY:
        return EncodeOffLoop(resp)
    return resp


def max_session_partitions(config: Any) -> int:
    try:
        return int(config.get("group.share.max.session.partitions"))
    except KeyError:
        return 10_000


def request_limit(config: Any) -> tuple[tuple[tuple[str, ...], ...], int]:
    """Most partitions (added plus forgotten) one ShareFetch may list (broker/wire_limits.py)."""
    return (("topics", "partitions"), ("forgotten_topics_data", "partitions")), \
        max_session_partitions(config)


def refuse_over_limit(ctx: RequestContext, count: int, most: int) -> Any:
    """The answer to a ShareFetch listing more partitions than a session may hold (not decoded)."""
    m = response_module(API_KEY, ctx.api_version)
    lock_ms = ctx.broker.config.get("group.share.record.lock.duration.ms")
    return top_level(m.ShareFetchResponse, lock_ms)(
        ErrorCode.share_session_limit_reached, _over_cap_message(count, most))


def _over_cap_message(count: int, most: int) -> str:
    return (f"the request would put {count} partitions in the share session; at most {most} "
            "are allowed (group.share.max.session.partitions)")


def _ms(td: Any) -> int:
    return max(0, int(td.total_seconds() * 1000)) if isinstance(td, timedelta) else int(td)


_ACQUIRE_MODES = frozenset(int(m) for m in AcquireMode)


async def _share_fetch(ctx: RequestContext, req: ShareFetchRequest) -> Any:
    broker = ctx.broker
    svc: ShareService = broker.shares
    m = response_module(API_KEY, ctx.api_version)
    group, member = req.group_id, req.member_id
    lock_ms = svc.partitions.lock_duration_ms(group) if group else 0
    max_wait_ms = _ms(req.max_wait)

    top = top_level(m.ShareFetchResponse, lock_ms)

    if not group:
        # Before authorization, as Kafka: a null id is no resource name to match ACLs against.
        return top(ErrorCode.invalid_request, request_problem(group, member))
    if not ctx.authorized(Operation.READ, Resource(ResourceType.GROUP, group)):
        return top(ErrorCode.group_authorization_failed, refusal(
            ctx.principal, Operation.READ, Resource(ResourceType.GROUP, group)))
    problem = request_problem(group, member)
    if problem:
        return top(ErrorCode.invalid_request, problem)
    acquire_mode = getattr(req, "share_acquire_mode", 0) or 0
    if acquire_mode not in _ACQUIRE_MODES:
        return top(ErrorCode.invalid_request,
                   f"ShareAcquireMode {acquire_mode} is not one of "
                   f"{', '.join(f'{v} ({n})' for n, v in AcquireMode.__members__.items())}")
    epoch = req.share_session_epoch
    is_renew = bool(getattr(req, "is_renew_ack", False))
    has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    if is_renew and (req.max_bytes or req.min_bytes or req.max_records or max_wait_ms):
        return top(ErrorCode.invalid_request,
                   "IsRenewAck requires MaxBytes, MinBytes, MaxRecords and MaxWaitMs to be 0")
    requested, unknown = _known_partitions(broker, req.topics)
    cap = max_session_partitions(broker.config)

    if epoch == 0:
        if has_acks:
            return top(ErrorCode.invalid_request, "a share session opened with epoch 0 cannot "
                                                  "carry acknowledgements")
        if len(requested) > cap:
            return top(ErrorCode.share_session_limit_reached,
                       _over_cap_message(len(requested), cap))
        session = svc.open_session(group, member, ctx.connection_id, list(requested))
        if session is None:
            # Kafka waits MaxWaitMs before answering, so a client does not spin on the error.
            fut = broker.logs.watch.watch([("share-session-freed",)])
            await wait_for_any(fut, max_wait_ms / 1000)
            return top(ErrorCode.share_session_limit_reached,
                       f"this broker already has {svc.sessions.max_sessions} share sessions "
                       "(group.share.max.share.sessions)")
        if broker.cluster.clustered:  # an offsets reset elsewhere: see revalidate
            await svc.partitions.revalidate(
                SharePartitionKey(group, tid, p) for tid, p in requested)
    else:
        error, session = svc.sessions.check(group, member, epoch)
        if error != ErrorCode.none or session is None:
            return top(error)
        if epoch != -1:
            held = session.partitions
            forgotten = {(ft.topic_id, p) for ft in req.forgotten_topics_data
                         for p in ft.partitions}
            if forgotten or any(tp not in held for tp in requested):
                size = len((held.keys() | requested.keys()) - forgotten)
                if size > cap:
                    return top(ErrorCode.share_session_limit_reached,
                               _over_cap_message(size, cap))
                for tp in requested:
                    held[tp] = None
                for tp in forgotten:
                    held.pop(tp, None)
            elif len(held) > cap:  # the usual request: the session's partitions, unchanged
                return top(ErrorCode.share_session_limit_reached,
                           _over_cap_message(len(held), cap))
            session.bump()

    refused = _refused_topics(ctx, session.partitions, requested)
    acks = (await svc.acknowledge_all(group, member, req.topics, ctx.api_version, is_renew,
                                      refused) if has_acks else {})

    if epoch == -1:
        svc.sessions.close(group, member)
        svc.release_session(session)
        broker.logs.watch.notify(("share-session-freed",))
        return top(ErrorCode.none, None, *_responses(m, ctx, unknown, acks, (), full=False))
    if is_renew or req.max_records <= 0 or req.max_bytes <= 0:
        return top(ErrorCode.none, None, *_responses(m, ctx, unknown, acks, (), full=epoch == 0))

    if not session.partitions:
        # Nothing to fetch: answered at once, as Kafka's SharePartitionManager does. librdkafka
        # opens its session with a broker a partition just moved to before it adds the
        # partition; waiting MaxWaitMs here delayed every move (a failover) by 500 ms.
        return top(ErrorCode.none, None, *_responses(m, ctx, unknown, acks, (), full=epoch == 0))
    mode = AcquireMode(acquire_mode)
    deadline = broker.clock.monotonic_ms() + max_wait_ms
    order = list(session.partitions)
    if order:
        shift = session.rotation % len(order)
        order = order[shift:] + order[:shift]
        session.rotation += 1
    denied: dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list]] = {}
    if refused:
        denied = {tp: _NOT_AUTHORIZED for tp in order if tp[0] in refused}
        readable = [tp for tp in order if tp[0] not in refused]
    else:
        readable = order
    fetched: dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list]] = {}
    budget, room = req.max_records, req.max_bytes
    parked = woken = False
    while True:
        got, errors, keys = await _acquire(ctx, svc, group, member, readable, req, mode,
                                           budget, room, woken, load_deadline_ms=deadline)
        for tp, (_code, data, acquired) in got.items():
            budget -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            room -= len(data)
            if tp in fetched:
                _c, had, had_acquired = fetched[tp]
                fetched[tp] = (ErrorCode.none, _join_batches(had, data), had_acquired + acquired)
            else:
                fetched[tp] = (ErrorCode.none, bytes(data), list(acquired))
        size = sum(len(d) for _c, d, _a in fetched.values())
        remaining = deadline - broker.clock.monotonic_ms()
        # MinBytes with MaxWaitMs, as Kafka's share fetch purgatory: answer once MinBytes are
        # acquired (or MaxRecords / MaxBytes are used up), else when MaxWaitMs runs out.
        if (size >= req.min_bytes or budget <= 0 or room <= 0 or errors or unknown
                or (denied and not readable) or remaining <= 0):
            break
        if not parked:
            parked = True
            broker.metrics.share_fetch_parked.value += 1
        fut = broker.logs.watch.watch(keys)
        woken = await wait_for_any(fut, remaining / 1000)
        if session is not svc.sessions.get(group, member):
            # The session was closed or replaced while we waited. A share-partition wakes one
            # parked fetch at a time: a wake-up this fetch will not use goes to the next one.
            if woken:
                for key in keys:
                    if key[0] == "share":
                        broker.logs.watch.notify(key, 1)
            break
    if not fetched:
        broker.metrics.share_fetch_empty.value += 1
    results = {**unknown, **denied, **errors, **fetched}
    return top(ErrorCode.none, None, *_responses(m, ctx, results, acks, order, full=epoch == 0))


_NOT_AUTHORIZED = (ErrorCode.topic_authorization_failed, b"", [])
_NOTHING = (ErrorCode.none, b"", ())


def _refused_topics(ctx: RequestContext, session_partitions: Any, requested: Any
                    ) -> frozenset[uuid.UUID]:
    """The ids of the topics, among the session's and the request's partitions, the principal
    may not READ; each topic is asked once (by name: ACLs name topics). Empty at once with
    authorization off."""
    if not ctx.broker.authorizer.enforcing:
        return frozenset()
    topics = ctx.broker.topics
    ids = {tp[0] for tp in session_partitions} | {tp[0] for tp in requested}
    names = {tid: t.name for tid in ids if (t := topics.by_id(tid)) is not None}
    denied = ctx.denied(Operation.READ, ResourceType.TOPIC, names.values())
    if not denied:
        return frozenset()
    return frozenset(tid for tid, name in names.items() if name in denied)


def _known_partitions(broker: Any, topics: Any
                      ) -> tuple[dict[tuple[uuid.UUID, int], None],
                                 dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list]]]:
    """Split requested partitions into those that exist (an ordered set, duplicates dropped)
    and the answers for those that do not, which never enter the session."""
    known: dict[tuple[uuid.UUID, int], None] = {}
    unknown: dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list]] = {}
    for t in topics:
        topic = broker.topics.by_id(t.topic_id)
        for p in t.partitions:
            tp = (t.topic_id, p.partition_index)
            if topic is None:
                unknown[tp] = (ErrorCode.unknown_topic_id, b"", [])
            elif not 0 <= p.partition_index < topic.partitions:
                unknown[tp] = (ErrorCode.unknown_topic_or_partition, b"", [])
            else:
                known[tp] = None
    return known, unknown


def _join_batches(had: bytes, more: bytes) -> bytes:
    """``had`` followed by the batches of ``more`` it does not already hold (by base offset): a
    later acquisition in the same response may cover the rest of a batch an earlier one sent."""
    try:
        seen = {h.base_offset for _pos, h in iter_batches(had)}
        out = bytearray(had)
        for pos, h in iter_batches(more):
            if h.base_offset not in seen:
                out += more[pos:pos + h.total_size]
    except CorruptRecordError:  # not whole batches: the client sorts them out by offset
        return bytes(had) + bytes(more)
    return bytes(out)


async def _acquire(ctx: RequestContext, svc: ShareService, group: str, member: str,
                   order: list[tuple[uuid.UUID, int]], req: ShareFetchRequest, mode: AcquireMode,
                   budget: int, room: int, woken: bool = False, *,
                   load_deadline_ms: int = 0) -> tuple[dict, dict, list]:
    """Acquire up to ``budget`` records and about ``room`` bytes from ``order``.

    A share-partition not loaded yet is waited for until ``load_deadline_ms`` (the fetch's
    MaxWaitMs, monotonic), then answered with nothing while its load goes on.

    A share-partition wakes one parked fetch at a time (partition_manager.py): after
    acquiring from one, or skipping it for want of budget after a wake-up (``woken``), the
    wake-up is passed on to the next parked fetch if records are left there."""
    broker = ctx.broker
    per_partition_bytes = max(1, room // max(1, len(order)))
    fetched: dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list]] = {}
    errors: dict[tuple[uuid.UUID, int], tuple[ErrorCode, bytes, list]] = {}
    keys: list[Any] = []
    for topic_id, p in order:
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            errors[(topic_id, p)] = (ErrorCode.unknown_topic_id, b"", [])
            continue
        if not 0 <= p < topic.partitions:
            errors[(topic_id, p)] = (ErrorCode.unknown_topic_or_partition, b"", [])
            continue
        not_here = leader_problem(ctx, topic.name, p)
        if not_here is not None:
            errors[(topic_id, p)] = (not_here, b"", [])
            continue
        keys.append((topic.name, p))
        keys.append(share_watch_key(group, topic.name, p))
        if budget <= 0:
            if woken:
                skipped = svc.partitions.get_loaded(SharePartitionKey(group, topic_id, p))
                if skipped is not None:
                    svc.partitions.pass_wakeup(skipped)
            continue
        sp = await svc.partitions.get(
            group, topic, p, wait_s=(load_deadline_ms - broker.clock.monotonic_ms()) / 1000)
        if sp is None or (isinstance(sp, ErrorCode) and sp in UNSURE):
            # Still loading, or the share state's coordinator is moving or away: nothing to
            # deliver from it yet, and no error, which both Kafka clients would raise to the
            # application; a later fetch finds it loaded.
            continue
        if not isinstance(sp, SharePartition):
            errors[(topic_id, p)] = (sp, b"", [])
            continue
        data, acquired = svc.partitions.acquire(sp, member, budget, req.batch_size or budget,
                                                mode, per_partition_bytes)
        if acquired:
            svc.partitions.pass_wakeup(sp)
            n = sum(a.last_offset - a.first_offset + 1 for a in acquired)
            budget -= n
            fetched[(topic_id, p)] = (ErrorCode.none, data, acquired)
            broker.metrics.share_fetch_bytes.inc(topic.name, len(data))
            broker.metrics.share_acquired_records.inc(topic.name, n)
    return fetched, errors, keys


def _responses(m: Any, ctx: RequestContext, results: dict, acks: dict[Any, AckResult],
               order: Any, *, full: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The per-topic responses and the NodeEndpoints of the leaders they point to."""
    notes = LeaderNotes(ctx, m)
    keys = list(dict.fromkeys([*(order if full else ()), *results, *acks]))
    by_topic: dict[uuid.UUID, list[Any]] = {}
    partition_data, acquired_records = m.PartitionData, m.AcquiredRecords
    for tp in keys:
        error, data, acquired = results.get(tp, _NOTHING)
        ack = acks.get(tp)
        by_topic.setdefault(tp[0], []).append(partition_data(  # same fields in v1 and v2
            partition_index=tp[1], error_code=error, error_message=None,
            acknowledge_error_code=(ack.error.value if ack else 0),
            acknowledge_error_message=(ack.message if ack and ack.error != ErrorCode.none else None),
            current_leader=notes.leader(tp[0], tp[1], error), records=data,
            acquired_records=tuple(acquired_records(first_offset=a.first_offset,
                                                    last_offset=a.last_offset,
                                                    delivery_count=a.delivery_count)
                                   for a in acquired)))
    return tuple(m.ShareFetchableTopicResponse(topic_id=t, partitions=tuple(ps))
                 for t, ps in by_topic.items()), notes.endpoints()
