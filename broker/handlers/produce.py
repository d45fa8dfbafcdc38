"""Produce (0) v3-12: validate the record batch, apply idempotence checks, append.

Each partition's records must be one v2 batch that passes ``protocol.log_validator`` (every record
is read, compressed ones after decompression; CRC-32C, counts, offset deltas, sizes,
``max.message.bytes``, timestamps per ``message.timestamp.type`` and its before/after bounds);
otherwise that partition is answered with CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE or
INVALID_TIMESTAMP and an error message, and nothing of it is appended (other partitions and the
connection are unaffected). Batches are stored as produced (only the base offset is rewritten,
which the CRC does not cover), except that the header's max timestamp and timestamp type are set
as the topic demands (LogAppendTime), with a new CRC. The response is sent after the append is in
the log (page cache), and after an fsync too when the flush policy says so. ``acks=0`` gets no
response.

Reading the records costs about 1 us each. A request whose headers claim many records to read
(``OFFLOAD_COST``) is validated in a worker thread so other connections keep being served; the
idempotence checks and appends always run on the event loop, and each connection's Produce
requests are appended in the order they arrived (a later one waits for an offloaded one).

Authorization (``broker/authz.py``): WRITE on each topic, asked once per topic; a partition of a
topic the principal may not write is answered TOPIC_AUTHORIZATION_FAILED before anything else is
checked (so an unknown topic is not told apart from a forbidden one), as Kafka does. A request with
a transactional id needs WRITE on it first: refused, every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

Transactions (KIP-98, ``broker/log/txn_log.py``; checked in ``broker/log/append.py``): a
transactional batch follows the idempotence rules (duplicates, sequences, INVALID_PRODUCER_EPOCH
for an older epoch) and needs the request's transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and a producer id (else INVALID_RECORD). When it would begin
the producer's transaction in the partition, the transaction coordinator (``broker.transactions``)
is asked whether the partition is in that transaction (``verify_partition``); its error answers the
partition otherwise, translated as Kafka's ReplicaManager does (``broker.log.append.verification_error``:
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH, retriable coordinator errors NOT_ENOUGH_REPLICAS). A plain batch of a producer whose transaction is ongoing there is
INVALID_TXN_STATE. From v12 (transaction version 2, KIP-890 part 2) the broker adds such a
partition to the transaction itself (``_implicit_additions``), before appending. A cluster
member asks the transactional id's coordinator, wherever it is, before the appends
(``_ask_coordinator``; AddPartitionsToTxn v4+ over the wire, ``broker/txn_remote.py``). Control batches (markers) are refused from clients (INVALID_RECORD,
``protocol/log_validator.py``): only the coordinator writes them. Non-transactional batches pay one
attribute test for all this.

Storage faults (``storage/log_dir.py``) are answered per partition, as Kafka does, and never
drop the connection: a partition whose append or policy fsync fails gets KAFKA_STORAGE_ERROR (its
partial write was cut back, so a retry cannot duplicate part of it), and so does every partition
after it, since the log directory is then offline. Partitions appended before the failure stay
appended and are answered with their offsets, so a retry of the failed ones duplicates nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, Resource, ResourceType, refusal
from broker.context import NO_RESPONSE, RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.handlers._routing import endpoint_entries, leader_problem, moved_leader
from broker.log.append import (
    FIRST_TV2_PRODUCE_VERSION,
    NEWEST_PRODUCE_VERSION,
    PartitionOutcome,
    PartitionVerifier,
    append_partition,
    validation_policy,
    verification_error,
)
from broker.log.topics import Topic
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop, denied_steps
from protocol.codec import response_module
from protocol.log_validator import (
    DECOMPRESSED_FLOOR,
    MIN_RECORD_BYTES,
    Rejected,
    Validated,
    validate_produced,
)
from protocol.messages import make
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_COUNT_OFFSET,
    TRANSACTIONAL_MASK,
)

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import ProduceRequest

API_KEY = 0
VERSIONS = (3, NEWEST_PRODUCE_VERSION)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


_REPLICATION_FAILURES = {
    ErrorCode.not_enough_replicas_after_append:
        "{tp}: appended, but the in-sync replicas fell below min.insync.replicas before they "
        "all had it; the producer retries",
    ErrorCode.not_leader_or_follower:
        "{tp}: leadership moved before the in-sync replicas had the records up to offset "
        "{end}; the producer retries at the new leader",
    ErrorCode.request_timed_out:
        "{tp}: the in-sync replicas did not confirm the records up to offset {end} within the "
        "request timeout (a follower is slow or gone and has not left the ISR yet)",
}


def _partition(m: Any, index: int, out: PartitionOutcome, **leader: Any) -> Any:
    append_time = None if out.log_append_time_ms < 0 else \
        _EPOCH + datetime.timedelta(milliseconds=out.log_append_time_ms)
    errors = tuple(make(m.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=msg)
                   for i, msg in out.record_errors)
    return make(m.PartitionProduceResponse, index=index, error_code=out.error,
                base_offset=out.base_offset, log_append_time=append_time,
                log_start_offset=out.log_start_offset, record_errors=errors,
                error_message=out.message, **leader)


def handle(ctx: RequestContext, req: ProduceRequest) -> Any:
    broker = ctx.broker
    order = _order(broker)
    before = order.get(ctx.connection_id)
    many = sum(len(td.partition_data) for td in req.topic_data) > YIELD_EVERY
    if (before is None and not many and validation_cost(req) < OFFLOAD_COST
            and not _implicit_additions(ctx, req, broker.links is not None)):
        return _produce(ctx, req, {})
    # Validated in a worker thread so other connections keep being served; later Produce
    # requests of this connection wait for it, so its appends stay in request order (an
    # idempotent producer pipelines up to five requests).
    task = asyncio.ensure_future(_produce_later(ctx, req, before))
    order[ctx.connection_id] = task
    conn = ctx.connection_id

    def forget(t: asyncio.Future[Any]) -> None:
        if order.get(conn) is t:
            order.pop(conn, None)

    task.add_done_callback(forget)
    return task


# Validation of a request estimated to read more records than this (about 0.1 s on the event
# loop) runs in a worker thread. A compressed batch counts for at least COMPRESSED_COST, since it
# may expand up to its decompression limit before its record count can be checked.
OFFLOAD_COST = 100_000
COMPRESSED_COST = 10_000

_orders: weakref.WeakKeyDictionary[Broker, dict[int, asyncio.Future[Any]]] = \
    weakref.WeakKeyDictionary()


def _order(broker: Broker) -> dict[int, asyncio.Future[Any]]:
    """Per connection, its latest Produce still validating off the event loop."""
    order = _orders.get(broker)
    if order is None:
        order = _orders[broker] = {}

        def closed(cid: int) -> None:
            order.pop(cid, None)

        broker.add_close_listener(closed)
    return order


def validation_cost(req: ProduceRequest) -> int:
    """Records the validation of a Produce request may have to read (from the batch headers'
    claims, capped by what the bytes can hold)."""
    cost = 0
    for td in req.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if not r or len(r) < BATCH_HEADER_SIZE:
                continue
            count = max(0, int.from_bytes(r[RECORD_COUNT_OFFSET:BATCH_HEADER_SIZE], "big",
                                          signed=True))
            if r[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK:
                cost += COMPRESSED_COST + min(count, DECOMPRESSED_FLOOR // MIN_RECORD_BYTES)
            else:
                cost += min(count, len(r) // MIN_RECORD_BYTES)
    return cost


async def _produce_later(ctx: RequestContext, req: ProduceRequest, before: asyncio.Future[Any] | None) -> Any:
    if before is not None:
        await asyncio.wait([before])  # its outcome is its own request's
    broker = ctx.broker
    checks: dict[tuple[int, int], Validated | Rejected] = {}
    if validation_cost(req) >= OFFLOAD_COST:
        now = broker.clock.now_ms()
        jobs = []
        td: Any  # the TopicProduceData of req's version (enumerate over their union)
        for ti, td in enumerate(req.topic_data):
            topic = _topic(broker, td, ctx.api_version)
            if topic is None or topic.internal:
                continue
            policy = validation_policy(topic.configs, broker, ctx.api_version)
            for pi, pd in enumerate(td.partition_data):
                if pd.records and 0 <= pd.index < topic.partitions:
                    jobs.append(((ti, pi), pd.records, policy))
        results = await asyncio.to_thread(
            lambda: [validate_produced(r, policy, now) for _, r, policy in jobs])
        checks = {key: res for (key, _, _), res in zip(jobs, results, strict=True)}
    verifier = None
    if broker.links is not None:
        additions = _implicit_additions(ctx, req, True)
        if additions:
            assert req.transactional_id is not None  # additions come from a transaction only
            refused, verifier = await _ask_coordinator(ctx, req.transactional_id, additions)
            checks.update(refused)
    else:
        additions = _implicit_additions(ctx, req)
        if additions:
            assert req.transactional_id is not None  # additions come from a transaction only
            checks.update(await _add_implicitly(ctx, req.transactional_id, additions))
    result = await _produce_sliced(ctx, req, checks, verifier)
    if inspect.isawaitable(result):
        result = await result
    if sum(len(t.partition_data) for t in req.topic_data) > YIELD_EVERY \
            and result is not NO_RESPONSE:
        return EncodeOffLoop(result)  # an answer of that many partitions is encoded off the loop
    return result


def _implicit_additions(ctx: RequestContext, req: ProduceRequest, any_version: bool = False
                        ) -> dict[tuple[int, int], tuple[str, int, int, int]]:
    """Produce v12+ of a transaction-version-2 producer (KIP-890 part 2): (topic index, partition
    index) -> (topic, partition, producer id, epoch) of each transactional batch that would begin
    the producer's transaction in its partition. The broker adds those partitions to the
    transaction itself (Kafka's ``addPartition`` verification), as the producer sends no
    AddPartitionsToTxn. Partitions that cannot be appended anyway are left to ``_produce``.
    ``any_version`` (a cluster member): the same for every version, whose partitions a cluster
    member verifies with the coordinator before appending (``_ask_coordinator``)."""
    txn_id = getattr(req, "transactional_id", None)
    if txn_id is None or (ctx.api_version < FIRST_TV2_PRODUCE_VERSION and not any_version):
        return {}
    broker = ctx.broker
    out: dict[tuple[int, int], tuple[str, int, int, int]] = {}
    td: Any  # the TopicProduceData of req's version (enumerate over their union)
    for ti, td in enumerate(req.topic_data):
        topic = _topic(broker, td, ctx.api_version)
        if topic is None or topic.internal or not ctx.authorized(
                Operation.WRITE, Resource(ResourceType.TOPIC, topic.name), audit=False):
            continue
        for pi, pd in enumerate(td.partition_data):
            r = pd.records
            if (not r or len(r) < BATCH_HEADER_SIZE or not 0 <= pd.index < topic.partitions
                    or not r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK):
                continue
            pid = int.from_bytes(r[PRODUCER_ID_OFFSET:PRODUCER_EPOCH_OFFSET], "big", signed=True)
            epoch = int.from_bytes(r[PRODUCER_EPOCH_OFFSET:BASE_SEQUENCE_OFFSET], "big",
                                   signed=True)
            if pid < 0 or broker.logs.get(topic.name, pd.index) is None:
                continue
            if any_version and leader_problem(ctx, topic.name, pd.index) is not None:
                continue
            try:
                if not broker.producer_states(topic.name, pd.index).begins_transaction(pid, epoch):
                    continue
            except OSError:
                continue  # the append answers KAFKA_STORAGE_ERROR
            out[(ti, pi)] = (topic.name, pd.index, pid, epoch)
    return out


async def _add_implicitly(ctx: RequestContext, txn_id: str,
                          additions: dict[tuple[int, int], tuple[str, int, int, int]]
                          ) -> dict[tuple[int, int], Rejected]:
    """Add the partitions to the producer's transaction (one coordinator write per producer
    id and epoch in the request); the refusals, translated as Kafka's ReplicaManager does, for
    the partitions not added. Authorization is checked first, as Produce checks it anyway."""
    if not ctx.authorized(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, txn_id),
                          audit=False):
        return {}  # _produce refuses every partition
    by_producer: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key, (_, _, pid, epoch) in additions.items():
        by_producer.setdefault((pid, epoch), []).append(key)
    refused: dict[tuple[int, int], Rejected] = {}
    for (pid, epoch), keys in by_producer.items():
        parts = [additions[k][:2] for k in keys]
        error = await ctx.broker.transactions.add_partitions(txn_id, pid, epoch, parts,
                                                             client_tv=2)
        if error != ErrorCode.none:
            answer, why = verification_error(error, ctx.api_version)
            for k in keys:
                refused[k] = Rejected(answer, f"transactional id {txn_id!r} (producer {pid}, "
                                              f"epoch {epoch}): {why}")
    return refused


class _Verified:
    """The coordinator's answers asked before the appends (``_ask_coordinator``): NONE for the
    partitions it confirmed; any other partition found beginning a transaction meanwhile is
    NOT_COORDINATOR, which the producer retries."""

    def __init__(self, ok: set[tuple[str, int, int, int]]) -> None:
        self._ok = ok

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         topic: str, partition: int) -> ErrorCode:
        if (topic, partition, producer_id, producer_epoch) in self._ok:
            return ErrorCode.none
        return ErrorCode.not_coordinator


async def _ask_coordinator(ctx: RequestContext, txn_id: str,
                           additions: dict[tuple[int, int], tuple[str, int, int, int]]
                           ) -> tuple[dict[tuple[int, int], Rejected], _Verified]:
    """A cluster member's verification (Produce v3-11) or implicit addition (v12) of the
    partitions whose batches begin a transaction, at the transactional id's coordinator
    wherever it is (``broker.links.txn``): the refusals, translated as Kafka's ReplicaManager
    does, and the verifier the appends consult."""
    links = ctx.broker.links
    assert links is not None
    if not ctx.authorized(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, txn_id),
                          audit=False):
        return {}, _Verified(set())  # _produce refuses every partition
    by_producer: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key, (_, _, pid, epoch) in additions.items():
        by_producer.setdefault((pid, epoch), []).append(key)
    refused: dict[tuple[int, int], Rejected] = {}
    ok: set[tuple[str, int, int, int]] = set()
    tv2 = ctx.api_version >= FIRST_TV2_PRODUCE_VERSION
    for (pid, epoch), keys in by_producer.items():
        parts = [additions[k][:2] for k in keys]
        if tv2:
            codes = dict.fromkeys(parts, await links.txn.add(txn_id, pid, epoch, parts))
        else:
            codes = await links.txn.verify(txn_id, pid, epoch, parts)
        for k in keys:
            error = codes[additions[k][:2]]
            if error == ErrorCode.none:
                ok.add(additions[k])
                continue
            answer, why = verification_error(error, ctx.api_version)
            refused[k] = Rejected(answer, f"transactional id {txn_id!r} (producer {pid}, "
                                          f"epoch {epoch}): {why}")
    return refused, _Verified(ok)


def _topic(broker: Broker, td: Any, api_version: int) -> Topic | None:
    return broker.topics.by_id(td.topic_id) if api_version >= 13 else broker.topics.get(td.name)


def _produce(ctx: RequestContext, req: ProduceRequest,
             checks: dict[tuple[int, int], Validated | Rejected],
             verifier: PartitionVerifier | None = None) -> Any:
    """Validate (what ``checks`` does not already hold) and append every partition, then
    answer (after a flush when the policy says so)."""
    steps = _produce_steps(ctx, req, checks, verifier)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def _produce_sliced(ctx: RequestContext, req: ProduceRequest,
                          checks: dict[tuple[int, int], Validated | Rejected],
                          verifier: PartitionVerifier | None = None) -> Any:
    """``_produce`` handing the event loop back every ``YIELD_EVERY`` partitions (a request of
    tens of thousands of partitions, issue 25)."""
    steps = _produce_steps(ctx, req, checks, verifier)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await asyncio.sleep(0)


def _produce_steps(ctx: RequestContext, req: ProduceRequest,
                   checks: dict[tuple[int, int], Validated | Rejected],
                   verifier: PartitionVerifier | None = None
                   ) -> Generator[None, None, Any]:
    """``_produce`` as steps: it yields every ``YIELD_EVERY`` partitions; its value is the
    answer."""
    seen = 0
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    by_id = ctx.api_version >= 13
    responses = []
    appended: list[tuple[str, int]] = []
    # acks=all partitions of replicated topics: (topic, partition, log end after the append).
    replicated: list[tuple[str, int, int]] = []
    rep = broker.replication
    leaders: dict[int, Any] = {}  # KIP-951: where NOT_LEADER_OR_FOLLOWER partitions went
    resolved = []
    td: Any  # the TopicProduceData of req's version (enumerate over their union)
    for i, td in enumerate(req.topic_data):
        if i and i % YIELD_EVERY == 0:
            yield
        resolved.append((td, _topic(broker, td, ctx.api_version)))
    denied = yield from denied_steps(ctx, Operation.WRITE, ResourceType.TOPIC,
                                     (topic.name if topic is not None else td.name
                                      for td, topic in resolved if topic is not None or not by_id))
    txn_id = getattr(req, "transactional_id", None)
    txn_refused = None
    if txn_id is not None:
        # Kafka: WRITE on the transactional id, else every partition is refused with
        # TRANSACTIONAL_ID_AUTHORIZATION_FAILED before the topics are looked at.
        resource = Resource(ResourceType.TRANSACTIONAL_ID, txn_id)
        if not ctx.authorized(Operation.WRITE, resource):
            txn_refused = refusal(ctx.principal, Operation.WRITE, resource)
    for ti, (td, topic) in enumerate(resolved):
        parts = []
        name = topic.name if topic is not None else getattr(td, "name", None)
        refused = None
        if name is not None and name in denied:
            refused = refusal(ctx.principal, Operation.WRITE, Resource(ResourceType.TOPIC, name))
        for pi, pd in enumerate(td.partition_data):
            seen += 1
            if seen % YIELD_EVERY == 0:
                yield
            if txn_refused is not None:
                parts.append(_partition(m, pd.index, PartitionOutcome(
                    ErrorCode.transactional_id_authorization_failed, message=txn_refused)))
                continue
            if refused is not None:
                parts.append(_partition(m, pd.index, PartitionOutcome(
                    ErrorCode.topic_authorization_failed, message=refused)))
                continue
            if topic is None or not 0 <= pd.index < topic.partitions:
                err = ErrorCode.unknown_topic_id if by_id and topic is None \
                    else ErrorCode.unknown_topic_or_partition
                parts.append(_partition(m, pd.index, PartitionOutcome(err)))
                continue
            if topic.internal:
                # Coordinator logs are written only by their coordinators; a stray record would
                # break replay (Kafka answers InvalidTopicException too).
                parts.append(_partition(m, pd.index, PartitionOutcome(
                    ErrorCode.invalid_topic_exception,
                    message=f"cannot produce to internal topic {topic.name}")))
                continue
            not_here = leader_problem(ctx, topic.name, pd.index)
            if not_here is not None:
                parts.append(_partition(m, pd.index, PartitionOutcome(not_here), **moved_leader(
                    ctx, m, topic.name, pd.index, leaders)))
                continue
            if rep is not None and req.acks == -1 and \
                    (short := rep.min_isr_problem(topic.name, pd.index)) is not None:
                parts.append(_partition(m, pd.index, PartitionOutcome(
                    ErrorCode.not_enough_replicas, message=short)))
                continue
            out = append_partition(broker, topic.name, topic.configs, pd.index, pd.records,
                                   ctx.api_version, checks.get((ti, pi)), txn_id, verifier)
            if out.error == ErrorCode.none:
                appended.append((topic.name, pd.index))
                if rep is not None and req.acks == -1 and rep.tracks(topic.name, pd.index) \
                        and (lg := broker.logs.get(topic.name, pd.index)) is not None:
                    replicated.append((topic.name, pd.index, lg.log_end_offset))
            parts.append(_partition(m, pd.index, out))
        responses.append(make(m.TopicProduceResponse, name=getattr(td, "name", None),
                              topic_id=getattr(td, "topic_id", None),
                              partition_responses=tuple(parts)))
    if appended and getattr(req, "transactional_id", None) is not None:
        broker.txn_log.write_ahead(appended)  # its syncs at EndTxn find less to write
    if req.acks == 0:
        if appended:
            return _flush_then(broker, appended, NO_RESPONSE, m)
        return NO_RESPONSE
    resp = make(m.ProduceResponse, responses=tuple(responses), throttle_time=NO_THROTTLE,
                node_endpoints=endpoint_entries(m, leaders))
    now = broker.clock.now_ms()
    due = [(t, p) for t, p in appended if (lg := broker.logs.get(t, p)) and lg.needs_flush(now)]
    if due or replicated:
        return _flush_then(broker, due, resp, m, replicated, int(req.timeout.total_seconds()))
    return resp


async def _flush_then(broker: Broker, parts: list[tuple[str, int]], resp: Any, m: Any,
                      replicated: list[tuple[str, int, int]] | None = None,
                      timeout_s: float = 30) -> Any:
    """Wait for the fsyncs the flush policy asks for, then (acks=all) for the in-sync replicas
    to have each ``replicated`` partition's records, at most ``timeout_s``. A partition whose
    fsync failed is answered KAFKA_STORAGE_ERROR instead of its offset (its records are not
    known to be durable); one the replicas did not confirm, with the replication's code
    (``ReplicaManager.wait_replicated``)."""
    failed: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
    for t, p in parts:
        try:
            await broker.logs.flush_if_needed(t, p)
        except OSError as exc:
            failed[(t, p)] = (ErrorCode.kafka_storage_error,
                              f"{t}-{p} appended but not synced: {exc}")
    rep = broker.replication
    if replicated and rep is not None:
        codes = await rep.wait_replicated_all(replicated, max(timeout_s, 0.001))
        for (t, p, end), code in zip(replicated, codes):
            if code != ErrorCode.none and (t, p) not in failed:
                failed[(t, p)] = (code, _REPLICATION_FAILURES.get(code, "").format(
                    tp=f"{t}-{p}", end=end))
    if not failed or resp is NO_RESPONSE:
        return resp
    topics = []
    name: Any  # str, or None for a topic id no longer known (never in ``failed``)
    for tr in resp.responses:
        name = getattr(tr, "name", None)
        if name is None:  # v13+: by topic id
            topic = broker.topics.by_id(getattr(tr, "topic_id", None))
            name = topic.name if topic is not None else None
        parts_out = tuple(
            _partition(m, pr.index, PartitionOutcome(failed[(name, pr.index)][0],
                                                     message=failed[(name, pr.index)][1]))
            if (name, pr.index) in failed else pr
            for pr in tr.partition_responses)
        topics.append(make(m.TopicProduceResponse, name=getattr(tr, "name", None),
                           topic_id=getattr(tr, "topic_id", None), partition_responses=parts_out))
    return make(m.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE,
                node_endpoints=())
