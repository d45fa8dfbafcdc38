"""Appending one partition's produced records: the path Produce and the dead-letter writer share.

``append_partition`` validates a partition's record batch (``protocol.log_validator``, unless the
caller validated it already, e.g. in a worker thread), checks the transactional preconditions and
the producer's idempotence state, asks the transaction coordinator whether a batch that would
begin a transaction in the partition belongs to one (KIP-890 verification), appends to the log
(page cache) and updates the producer state and the produce metrics. Every expected outcome is a
``PartitionOutcome`` with an error code; nothing is raised for them. A storage fault (the log
directory went offline) is KAFKA_STORAGE_ERROR. Flushing is the caller's: it asks
``broker.logs.needs_flush``/``flush_if_needed`` after the appends of a request.

The broker is reached through ``AppendHost``, the few things an append needs of it; ``Broker``
is one. Callers: ``broker/handlers/produce.py`` (per partition of a Produce request) and
``broker/share/dead_letter_writer.py`` (dead-letter records of share groups, KIP-1191).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.clock import Clock
from broker.config import BrokerConfig, cleanup_policies, topic_config_value
from broker.log.manager import LogManager
from broker.log.producer_state import ProducerStates
from broker.metrics import LabelledCounter
from protocol.log_validator import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Rejected,
    Validated,
    ValidationPolicy,
    validate_produced,
)

#: The newest Produce version served (``broker/handlers/produce.py``); the validation rules of an
#: append without a request (the dead-letter writer's) are this version's.
NEWEST_PRODUCE_VERSION = 12


class ProduceMetrics(Protocol):
    produce_bytes: LabelledCounter
    produce_records: LabelledCounter


class PartitionVerifier(Protocol):
    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         topic: str, partition: int) -> ErrorCode:
        """NONE when (topic, partition) is in the producer's ongoing transaction, else why not."""
        ...


class AppendHost(Protocol):
    """What an append needs of the broker."""

    config: BrokerConfig
    logs: LogManager
    clock: Clock

    @property
    def metrics(self) -> ProduceMetrics: ...  # read-only: the broker's metrics are wider

    @property
    def transactions(self) -> PartitionVerifier: ...

    def producer_states(self, topic: str, partition: int) -> ProducerStates:
        """The partition's producer state (may read the log tail on first use)."""
        ...


log = logging.getLogger("shoal.produce")

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


def validation_policy(configs: dict[str, Any], broker: AppendHost,
                      api_version: int) -> ValidationPolicy:
    """The topic's produce rules, from its configs and the broker defaults."""
    def v(name: str) -> Any:
        return topic_config_value(name, configs, broker.config)

    ts_type = LOG_APPEND_TIME if v("message.timestamp.type") == "LogAppendTime" else CREATE_TIME
    return ValidationPolicy(max_batch_bytes=int(v("max.message.bytes")), timestamp_type=ts_type,
                            before_max_ms=int(v("message.timestamp.before.max.ms")),
                            after_max_ms=int(v("message.timestamp.after.max.ms")),
                            api_version=api_version,
                            require_keys="compact" in cleanup_policies(v("cleanup.policy")))


def append_partition(broker: AppendHost, topic_name: str, configs: dict[str, Any], p: int,
                     records: bytes | None, api_version: int = NEWEST_PRODUCE_VERSION,
                     checked: Validated | Rejected | None = None,
                     transactional_id: str | None = None,
                     verifier: PartitionVerifier | None = None) -> PartitionOutcome:
    """Validate (unless ``checked`` already holds the validation) and append one partition's
    records (``transactional_id``: the request's, for transactional batches; ``verifier``:
    who answers the KIP-890 verification, ``broker.transactions`` unless given)."""
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
    if txn and states.begins_transaction(h.producer_id, h.producer_epoch):
        # The batch would begin the producer's transaction here: the coordinator must have it in
        # the transaction (KIP-890 verification; later batches of it need no question).
        assert transactional_id is not None  # _transactional_refusal checked it
        error = (verifier or broker.transactions).verify_partition(
            transactional_id, h.producer_id, h.producer_epoch, topic_name, p)
        if error != ErrorCode.none:
            answer, why = verification_error(error, api_version)
            return PartitionOutcome(answer, log_start_offset=lso, message=(
                f"{topic_name}-{p}, transactional id {transactional_id!r} (producer "
                f"{h.producer_id}, epoch {h.producer_epoch}): {why}"))
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


#: Produce v11 (KIP-890) knows TRANSACTION_ABORTABLE; v12 is the transaction-version-2 Produce.
FIRST_ABORTABLE_PRODUCE_VERSION = 11
FIRST_TV2_PRODUCE_VERSION = 12
_RETRIABLE_VERIFICATION = frozenset({
    ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator})


def verification_error(error: ErrorCode, api_version: int) -> tuple[ErrorCode, str]:
    """What a Produce partition is answered when the coordinator's verification said ``error``
    (Kafka ``AddPartitionsToTxnManager`` and ``ReplicaManager``), and the message.

    PRODUCER_FENCED is INVALID_PRODUCER_EPOCH (producers abort on it, where PRODUCER_FENCED in a
    Produce answer would be fatal); TRANSACTION_ABORTABLE is INVALID_TXN_STATE below v11, which
    does not know it. Retriable coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE, and CONCURRENT_TRANSACTIONS below v12) are NOT_ENOUGH_REPLICAS,
    which every producer retries without refreshing its metadata; v12 keeps
    CONCURRENT_TRANSACTIONS, common while the previous transaction of a transaction-version-2
    producer completes."""
    if error is ErrorCode.producer_fenced:
        return (ErrorCode.invalid_producer_epoch,
                "the producer epoch is fenced by a newer producer with the same transactional id")
    if error is ErrorCode.transaction_abortable and api_version < FIRST_ABORTABLE_PRODUCE_VERSION:
        error = ErrorCode.invalid_txn_state
    if error is ErrorCode.invalid_txn_state or error is ErrorCode.transaction_abortable:
        return error, ("Partition was not added to the transaction; the producer must add it "
                       "(AddPartitionsToTxn) first")
    if error in _RETRIABLE_VERIFICATION or (error is ErrorCode.concurrent_transactions
                                            and api_version < FIRST_TV2_PRODUCE_VERSION):
        return (ErrorCode.not_enough_replicas, "Unable to verify the partition has been added "
                f"to the transaction. Underlying error: {error.name.upper()}; retry")
    return error, f"not in the ongoing transaction: {error.name.upper()}"


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
