"""Produce (0) v3-12: validate record batches, apply idempotence checks, append.

Each partition's records must be whole v2 batches with a valid CRC32C and no larger than
``max.message.bytes``; otherwise that partition is answered with CORRUPT_MESSAGE or
MESSAGE_TOO_LARGE and nothing of it is appended (other partitions are unaffected). Batches are
stored byte for byte (only the base offset is rewritten, which the CRC does not cover), so every
compression codec passes through untouched. The response is sent after the append is in the log
(page cache), and after an fsync too when the flush policy says so. ``acks=0`` gets no response.

Authorization (``broker/authz.py``): WRITE on each topic, asked once per topic; a partition of a
topic the principal may not write is answered TOPIC_AUTHORIZATION_FAILED before anything else is
checked (so an unknown topic is not told apart from a forbidden one), as Kafka does. Transactional
batches are refused below anyway, so TRANSACTIONAL_ID WRITE is never asked.

Storage faults (``persister/log_dir.py``) are answered per partition, as Kafka does, and never
drop the connection: a partition whose append or policy fsync fails gets KAFKA_STORAGE_ERROR (its
partial write was cut back, so a retry cannot duplicate part of it), and so does every partition
after it, since the log directory is then offline. Partitions appended before the failure stay
appended and are answered with their offsets, so a retry of the failed ones duplicates nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.app import Broker
from broker.authz import Operation, Resource, ResourceType, refusal
from broker.config import topic_config_value
from broker.context import NO_RESPONSE, RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make
from protocol.record_batch import CorruptRecordError, RecordTooLargeError, validate_batches

API_KEY = 0
VERSIONS = (3, 12)


def _partition(m: Any, index: int, error: ErrorCode, base: int = -1, log_start: int = -1,
               message: str | None = None) -> Any:
    return make(m.PartitionProduceResponse, index=index, error_code=error, base_offset=base,
                log_append_time=None, log_start_offset=log_start, record_errors=(),
                error_message=message)


def append_partition(broker: Broker, topic_name: str, configs: dict[str, Any], p: int,
                     records: bytes | None) -> tuple[ErrorCode, int, int, str | None]:
    """Validate and append one partition's records: (error, base offset, log start, message)."""
    lg = broker.logs.get(topic_name, p)
    if lg is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, None
    if not records:
        return ErrorCode.invalid_record, -1, lg.log_start_offset, "empty record set"
    max_bytes = topic_config_value("max.message.bytes", configs, broker.config)
    try:
        headers = validate_batches(records, max_bytes)
    except RecordTooLargeError as exc:
        return ErrorCode.message_too_large, -1, lg.log_start_offset, str(exc)
    except CorruptRecordError as exc:
        return ErrorCode.corrupt_message, -1, lg.log_start_offset, str(exc)
    states = broker.producer_states(topic_name, p)
    for h in headers:
        if h.is_transactional:
            return (ErrorCode.invalid_record, -1, lg.log_start_offset,
                    "transactional batches are not supported by Shoal yet")
    if len(headers) == 1:
        h = headers[0]
        check = states.check(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
        if check.error != ErrorCode.none:
            return check.error, -1, lg.log_start_offset, None
        if check.duplicate_of is not None:
            return ErrorCode.none, check.duplicate_of[0], lg.log_start_offset, None
    else:
        for h in headers:
            check = states.check(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
            if check.error != ErrorCode.none or check.duplicate_of is not None:
                return (ErrorCode.out_of_order_sequence_number if check.error == ErrorCode.none
                        else check.error), -1, lg.log_start_offset, None
    try:
        result = lg.append(records, broker.clock.now_ms())
    except OSError as exc:  # LogDirOfflineError: the directory is offline, the broker stopping
        return ErrorCode.kafka_storage_error, -1, -1, f"{topic_name}-{p} not appended: {exc}"
    offset = result.base_offset
    for h in headers:
        last = offset + h.last_offset_delta
        states.observe(h.producer_id, h.producer_epoch, h.base_sequence, h.record_count, offset, last)
        offset = last + 1
    broker.logs.appended(topic_name, p)
    metrics = broker.metrics
    metrics.produce_bytes.inc(topic_name, len(records))
    metrics.produce_records.inc(topic_name, offset - result.base_offset)
    return ErrorCode.none, result.base_offset, lg.log_start_offset, None


def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    m = response_module(API_KEY, ctx.api_version)
    by_id = ctx.api_version >= 13
    responses = []
    appended: list[tuple[str, int]] = []
    resolved = [(td, broker.topics.by_id(td.topic_id) if by_id else broker.topics.get(td.name))
                for td in req.topic_data]
    denied = ctx.denied(Operation.WRITE, ResourceType.TOPIC,
                        (topic.name if topic is not None else td.name
                         for td, topic in resolved if topic is not None or not by_id))
    for td, topic in resolved:
        parts = []
        name = topic.name if topic is not None else getattr(td, "name", None)
        refused = None
        if name is not None and name in denied:
            refused = refusal(ctx.principal, Operation.WRITE, Resource(ResourceType.TOPIC, name))
        for pd in td.partition_data:
            if refused is not None:
                parts.append(_partition(m, pd.index, ErrorCode.topic_authorization_failed,
                                        message=refused))
                continue
            if topic is None or not 0 <= pd.index < topic.partitions:
                err = ErrorCode.unknown_topic_id if by_id and topic is None \
                    else ErrorCode.unknown_topic_or_partition
                parts.append(_partition(m, pd.index, err))
                continue
            if topic.internal:
                # Coordinator logs are written only by their coordinators; a stray record would
                # break replay (Kafka answers InvalidTopicException too).
                parts.append(_partition(m, pd.index, ErrorCode.invalid_topic_exception,
                                        message=f"cannot produce to internal topic {topic.name}"))
                continue
            err, base, start, msg = append_partition(broker, topic.name, topic.configs, pd.index,
                                                     pd.records)
            if err == ErrorCode.none:
                appended.append((topic.name, pd.index))
            parts.append(_partition(m, pd.index, err, base, start, msg))
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
            _partition(m, pr.index, ErrorCode.kafka_storage_error, message=failed[(name, pr.index)])
            if (name, pr.index) in failed else pr
            for pr in tr.partition_responses)
        topics.append(make(m.TopicProduceResponse, name=getattr(tr, "name", None),
                           topic_id=getattr(tr, "topic_id", None), partition_responses=parts_out))
    return make(m.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE,
                node_endpoints=())
