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

Transactions (KIP-98, ``broker/txn_log.py``): a transactional batch follows the idempotence rules
(duplicates, sequences, INVALID_PRODUCER_EPOCH for an older epoch) and needs the request's
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and a producer id (else
INVALID_RECORD). When it would begin the producer's transaction in the partition, the transaction
coordinator (``broker.transactions``) is asked whether the partition is in
that transaction (``verify_partition``); its error answers the partition otherwise. A plain batch
of a producer whose transaction is ongoing there is INVALID_TXN_STATE. Control batches (markers)
are refused from clients (INVALID_RECORD, ``protocol/log_validator.py``): only the coordinator
writes them. Non-transactional batches pay one attribute test for all this.

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
import logging
import weakref
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.authz import Operation, Resource, ResourceType, refusal
from broker.config import cleanup_policies, topic_config_value
from broker.context import NO_RESPONSE, RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from broker.topics import Topic
from protocol.log_validator import (
    CREATE_TIME,
    DECOMPRESSED_FLOOR,
    LOG_APPEND_TIME,
    MIN_RECORD_BYTES,
    Rejected,
    Validated,
    ValidationPolicy,
    validate_produced,
)
from protocol.messages import make
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    RECORD_COUNT_OFFSET,
)

API_KEY = 0
VERSIONS = (3, 12)

log = logging.getLogger("shoal.produce")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
# Refused batches are logged at most this often, so a hostile client cannot flood the log; the
# next line says how many were not logged.
_LOG_INTERVAL_MS = 1000
_log_state = {"next_ms": 0, "suppressed": 0}


def _log_refusal(now_ms: int, topic: str, p: int, error: ErrorCode, message: str) -> None:
    if now_ms < _log_state["next_ms"]:
        _log_state["suppressed"] += 1
        return
    more = _log_state["suppressed"]
    _log_state["next_ms"], _log_state["suppressed"] = now_ms + _LOG_INTERVAL_MS, 0
    log.info("refused a produced batch for %s-%d with %s: %s (the producer gets this error; "
             "check its client version and settings)%s", topic, p, error.name.upper(), message,
             f"; {more} more refusal(s) not logged" if more else "")


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What one partition of a Produce request is answered with."""

    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    log_append_time_ms: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()


def _partition(m: Any, index: int, out: PartitionOutcome) -> Any:
    append_time = None if out.log_append_time_ms < 0 else \
        _EPOCH + datetime.timedelta(milliseconds=out.log_append_time_ms)
    errors = tuple(make(m.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=msg)
                   for i, msg in out.record_errors)
    return make(m.PartitionProduceResponse, index=index, error_code=out.error,
                base_offset=out.base_offset, log_append_time=append_time,
                log_start_offset=out.log_start_offset, record_errors=errors,
                error_message=out.message)


def validation_policy(configs: dict[str, Any], broker: Broker, api_version: int) -> ValidationPolicy:
    """The topic's produce rules, from its configs and the broker defaults."""
    def v(name: str) -> Any:
        return topic_config_value(name, configs, broker.config)

    ts_type = LOG_APPEND_TIME if v("message.timestamp.type") == "LogAppendTime" else CREATE_TIME
    return ValidationPolicy(max_batch_bytes=int(v("max.message.bytes")), timestamp_type=ts_type,
                            before_max_ms=int(v("message.timestamp.before.max.ms")),
                            after_max_ms=int(v("message.timestamp.after.max.ms")),
                            api_version=api_version,
                            require_keys="compact" in cleanup_policies(v("cleanup.policy")))


def append_partition(broker: Broker, topic_name: str, configs: dict[str, Any], p: int,
                     records: bytes | None, api_version: int = VERSIONS[1],
                     checked: Validated | Rejected | None = None,
                     transactional_id: str | None = None) -> PartitionOutcome:
    """Validate (unless ``checked`` already holds the validation) and append one partition's
    records (``transactional_id``: the request's, for transactional batches)."""
    lg = broker.logs.get(topic_name, p)
    if lg is None:
        return PartitionOutcome(ErrorCode.unknown_topic_or_partition)
    lso = lg.log_start_offset
    if not records:
        return PartitionOutcome(ErrorCode.invalid_record, log_start_offset=lso,
                                message="Produce v3+ needs exactly one record batch per "
                                        "partition; got none")
    now = broker.clock.now_ms()
    if checked is None:
        checked = validate_produced(records, validation_policy(configs, broker, api_version), now)
    if isinstance(checked, Rejected):
        _log_refusal(broker.clock.monotonic_ms(), topic_name, p, checked.error, checked.message)
        return PartitionOutcome(checked.error, log_start_offset=lso,
                                message=f"{topic_name}-{p}: {checked.message}",
                                record_errors=checked.record_errors)
    h = checked.header
    txn = h.is_transactional
    if txn:
        refused = _transactional_refusal(topic_name, p, h.producer_id, transactional_id)
        if refused is not None:
            return PartitionOutcome(refused[0], log_start_offset=lso, message=refused[1])
    # Idempotence is checked after validation, as Kafka does (a refused batch is no duplicate).
    try:
        states = broker.producer_states(topic_name, p)  # may read the log tail on first use
    except OSError as exc:  # LogDirOfflineError
        return PartitionOutcome(ErrorCode.kafka_storage_error,
                                message=f"{topic_name}-{p} not appended: {exc}")
    check = states.check(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count, now,
                         txn)
    if check.error != ErrorCode.none:
        return PartitionOutcome(check.error, log_start_offset=lso,
                                message=_sequence_message(check.error, topic_name, p, h))
    if check.duplicate_of is not None:
        return PartitionOutcome(ErrorCode.none, check.duplicate_of[0], lso)
    if txn and states.ongoing_first_offset(h.producer_id) < 0:
        # The batch would begin the producer's transaction here: the coordinator must have it in
        # the transaction (KIP-890 verification; later batches of it need no question).
        assert transactional_id is not None  # _transactional_refusal checked it
        error = broker.transactions.verify_partition(transactional_id, h.producer_id,
                                                     h.producer_epoch, topic_name, p)
        if error != ErrorCode.none:
            return PartitionOutcome(error, log_start_offset=lso, message=(
                f"{topic_name}-{p} is not in the ongoing transaction of transactional id "
                f"{transactional_id!r} (producer {h.producer_id}, epoch {h.producer_epoch}):"
                f" {error.name.upper()}; the producer must add it (AddPartitionsToTxn) first"))
    try:
        result = lg.append(checked.data, now)
    except OSError as exc:  # LogDirOfflineError: the directory is offline, the broker stopping
        return PartitionOutcome(ErrorCode.kafka_storage_error,
                                message=f"{topic_name}-{p} not appended: {exc}")
    last = result.base_offset + h.last_offset_delta
    states.observe(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count,
                   result.base_offset, last, now, txn)
    if txn:
        lg.first_unstable_offset = states.first_unstable_offset()
    broker.logs.appended(topic_name, p)
    metrics = broker.metrics
    metrics.produce_bytes.inc(topic_name, len(checked.data))
    metrics.produce_records.inc(topic_name, h.record_count)
    return PartitionOutcome(ErrorCode.none, result.base_offset, lg.log_start_offset,
                            log_append_time_ms=checked.log_append_time_ms)


def _transactional_refusal(topic: str, p: int, producer_id: int,
                           transactional_id: str | None) -> tuple[ErrorCode, str] | None:
    """Why a transactional batch cannot be taken whatever the producer state, or None."""
    if transactional_id is None:
        # Kafka refuses the request: transactional records need a transactional id to authorize.
        return (ErrorCode.transactional_id_authorization_failed,
                f"{topic}-{p}: a transactional batch needs the request's transactional id")
    if producer_id < 0:
        return (ErrorCode.invalid_record,
                f"{topic}-{p}: a transactional batch needs a producer id (InitProducerId)")
    return None


def _sequence_message(error: ErrorCode, topic: str, p: int, h: Any) -> str | None:
    """What to tell a producer whose batch the producer state refused (None: the code says it)."""
    if error == ErrorCode.invalid_txn_state:
        return (f"{topic}-{p}: producer {h.producer_id} sent a non-transactional batch while its "
                "transaction here is ongoing; commit or abort it first")
    return None


def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    order = _order(broker)
    before = order.get(ctx.connection_id)
    if before is None and validation_cost(req) < OFFLOAD_COST:
        return _produce(ctx, req, {})
    # Validated in a worker thread so other connections keep being served; later Produce
    # requests of this connection wait for it, so its appends stay in request order (an
    # idempotent producer pipelines up to five requests).
    task = asyncio.ensure_future(_produce_later(ctx, req, before))
    order[ctx.connection_id] = task
    task.add_done_callback(lambda t, c=ctx.connection_id: order.pop(c, None)
                           if order.get(c) is t else None)
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
        broker.add_close_listener(lambda cid: order.pop(cid, None))
    return order


def validation_cost(req: Any) -> int:
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


async def _produce_later(ctx: RequestContext, req: Any, before: asyncio.Future[Any] | None) -> Any:
    if before is not None:
        await asyncio.wait([before])  # its outcome is its own request's
    broker = ctx.broker
    checks: dict[tuple[int, int], Validated | Rejected] = {}
    if validation_cost(req) >= OFFLOAD_COST:
        now = broker.clock.now_ms()
        jobs = []
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
    result = _produce(ctx, req, checks)
    if inspect.isawaitable(result):
        result = await result
    return result


def _topic(broker: Broker, td: Any, api_version: int) -> Topic | None:
    return broker.topics.by_id(td.topic_id) if api_version >= 13 else broker.topics.get(td.name)


def _produce(ctx: RequestContext, req: Any,
             checks: dict[tuple[int, int], Validated | Rejected]) -> Any:
    """Validate (what ``checks`` does not already hold) and append every partition, then
    answer (after a flush when the policy says so)."""
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    by_id = ctx.api_version >= 13
    responses = []
    appended: list[tuple[str, int]] = []
    resolved = [(td, _topic(broker, td, ctx.api_version)) for td in req.topic_data]
    denied = ctx.denied(Operation.WRITE, ResourceType.TOPIC,
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
            out = append_partition(broker, topic.name, topic.configs, pd.index, pd.records,
                                   ctx.api_version, checks.get((ti, pi)), txn_id)
            if out.error == ErrorCode.none:
                appended.append((topic.name, pd.index))
            parts.append(_partition(m, pd.index, out))
        responses.append(make(m.TopicProduceResponse, name=getattr(td, "name", None),
                              topic_id=getattr(td, "topic_id", None),
                              partition_responses=tuple(parts)))
    if req.acks == 0:
        if appended:
            return _flush_then(broker, appended, NO_RESPONSE, m)
        return NO_RESPONSE
    resp = make(m.ProduceResponse, responses=tuple(responses), throttle_time=NO_THROTTLE,
                node_endpoints=())
    now = broker.clock.now_ms()
    due = [(t, p) for t, p in appended if (lg := broker.logs.get(t, p)) and lg.needs_flush(now)]
    if due:
        return _flush_then(broker, due, resp, m)
    return resp


async def _flush_then(broker: Broker, parts: list[tuple[str, int]], resp: Any, m: Any) -> Any:
    """Wait for the fsyncs the flush policy asks for; a partition whose fsync failed is answered
    KAFKA_STORAGE_ERROR instead of its offset (its records are not known to be durable)."""
    failed: dict[tuple[str, int], str] = {}
    for t, p in parts:
        try:
            await broker.logs.flush_if_needed(t, p)
        except OSError as exc:
            failed[(t, p)] = f"{t}-{p} appended but not synced: {exc}"
    if not failed or resp is NO_RESPONSE:
        return resp
    topics = []
    for tr in resp.responses:
        name = getattr(tr, "name", None)
        if name is None:  # v13+: by topic id
            topic = broker.topics.by_id(getattr(tr, "topic_id", None))
            name = topic.name if topic is not None else None
        parts_out = tuple(
            _partition(m, pr.index, PartitionOutcome(ErrorCode.kafka_storage_error,
                                                     message=failed[(name, pr.index)]))
            if (name, pr.index) in failed else pr
            for pr in tr.partition_responses)
        topics.append(make(m.TopicProduceResponse, name=getattr(tr, "name", None),
                           topic_id=getattr(tr, "topic_id", None), partition_responses=parts_out))
    return make(m.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE,
                node_endpoints=())
