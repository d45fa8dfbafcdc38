"""``TxnShard``: the transactions of one ``__transaction_state`` partition (sans-IO).

Concept (Kafka ``TransactionCoordinator`` + ``TransactionStateManager``; STYLE.md 1.3): write ops
(InitProducerId, AddPartitionsToTxn/AddOffsetsToTxn, EndTxn, completing after the markers, the
timeout abort, id expiration) read the current state and return ``CoordinatorResult(records,
response)``; ``replay`` is the only mutator. Every op runs on the partition's serial executor and
sees the records of the ops before it (committed or not), so Kafka's ``pendingState`` is not
needed: an op after an EndTxn already sees PrepareCommit and answers CONCURRENT_TRANSACTIONS.

Markers: once a PrepareCommit/PrepareAbort record is *committed* (durable) the shard tells its
``on_prepared`` listener (the service writes the markers, then runs ``complete``). On load the
listener hears of every transaction found in a Prepare state, so a crash between PrepareCommit
and CompleteCommit resumes the markers. Nothing is told while loading (``commit`` runs in the
loader thread then).

Timeouts: an Ongoing transaction times out at start + transaction.timeout.ms; ``next_deadline``
/ ``on_timer`` (``TimedShard``) fence it as Kafka's ``abortTimedOutTransactions``: PrepareAbort
with the epoch bumped, so the timed-out producer's next request is fenced. Deadlines are soft
state, rebuilt from replay (a reload keeps each transaction's deadline).

Transaction version 2 (KIP-890 part 2): ``end_txn_v2`` (EndTxn v5) writes the Prepare record with
the epoch bumped (its markers carry the new epoch), answers the next transaction's producer id and
epoch, and allows an abort without a transaction; ``add_partitions`` with ``client_tv=2`` is the
implicit addition by Produce v12 / TxnOffsetCommit v5. Such states are written as value v1
(``client_tv``, and the next/previous producer id when the epoch is exhausted).

Reads (DescribeTransactions, ListTransactions, ``verify``) use the committed view.

A retried InitProducerId whose first answer was lost (the client sends the producer id and
epoch it had) is answered again rather than fenced, from ``last_producer_epoch`` (Kafka
``lastProducerEpoch``) and ``prev_producer_id`` (after a move to a new producer id). As in Kafka
the former is kept in memory only: after a reload such a retry is fenced.

Invariants: ``txns`` equals the fold of the replayed records (a shard rebuilt from the log equals
the live one); an op never mutates; every written state follows ``VALID_PREVIOUS``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from coordinator.runtime.result import CoordinatorResult
from coordinator.runtime.timer import Timer
from coordinator.runtime.undo import UndoLog
from coordinator.txn.metadata import (
    EXHAUSTED_EPOCH,
    EXPIRABLE,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TxnMetadata,
    TxnState,
)
from coordinator.txn.records import (
    TxnRecord,
    encode_value,
    new_tombstone,
    new_txn_record,
)

S = TxnState
E = ErrorCode


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """InitProducerId's answer, and EndTxn's (v5 carries it)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class _Undo:
    offset: int
    ident: Hashable
    before: TxnMetadata | None
    before_offset: int | None


Result = CoordinatorResult[TxnRecord, object]


class TxnShard:
    """State of every transactional id of one partition (see module doc)."""

    def __init__(self, partition: int = 0, *,
                 on_prepared: Callable[[int, TxnMetadata], None] | None = None,
                 max_record_bytes: int = 1 << 20) -> None:
        """``max_record_bytes``: the largest ``__transaction_state`` value an op may write
        (message.max.bytes); AddPartitions past it is refused as Kafka refuses a record that is
        too large (UNKNOWN_SERVER_ERROR)."""
        self.partition = partition
        self.max_record_bytes = max_record_bytes
        self.txns: dict[str, TxnMetadata] = {}
        self._offsets: dict[str, int] = {}  # offset of each live id's latest record
        self._undo: UndoLog[_Undo] = UndoLog()
        self._timer: Timer[str] = Timer()
        self._prepared: deque[tuple[int, TxnMetadata]] = deque()  # replayed, not yet committed
        self._on_prepared = on_prepared
        self.loading = True
        self.end_offset = 0

    # ------------------------------------------------------------------ Shard

    def replay(self, offset: int, key: str, value: TxnMetadata | None) -> None:
        self._undo.append(_Undo(offset, key, self.txns.get(key), self._offsets.get(key)))
        self._set(key, value, offset if value is not None else None)
        if value is not None and value.state in PREPARED and not self.loading:
            self._prepared.append((offset, value))
        self.end_offset = offset + 1

    def commit(self, offset: int) -> None:
        self._undo.commit(offset)
        while self._prepared and self._prepared[0][0] < offset:
            _, meta = self._prepared.popleft()
            if self._on_prepared is not None:
                self._on_prepared(self.partition, meta)

    def revert(self, offset: int) -> None:
        self._undo.revert(offset, lambda u: self._set(str(u.ident), u.before, u.before_offset))
        while self._prepared and self._prepared[-1][0] >= offset:
            self._prepared.pop()
        self.end_offset = min(self.end_offset, offset)

    def on_loaded(self, now_ms: int) -> None:
        del now_ms
        self.loading = False
        if self._on_prepared is not None:
            for meta in list(self.txns.values()):
                if meta.state in PREPARED:
                    self._on_prepared(self.partition, meta)

    def on_unloaded(self) -> None:
        self._prepared.clear()
        self._on_prepared = None

    def last_redundant_offset(self) -> int | None:
        """Only each id's latest record is needed (tombstones of expired ids need nothing)."""
        return min(self._offsets.values()) if self._offsets else self.end_offset

    def next_deadline(self) -> int | None:
        return self._timer.next_deadline()

    def on_timer(self, now_ms: int) -> Result:
        """Abort every Ongoing transaction past its deadline, fencing its producer (epoch + 1)."""
        records = []
        for txn_id in self._timer.keys():
            deadline = self._timer.deadline(txn_id)
            if deadline is None or deadline > now_ms:
                break
            meta = self.txns.get(txn_id)
            if meta is not None and meta.state is S.ONGOING:
                records.append(new_txn_record(_fenced_abort(meta, now_ms)))
        return CoordinatorResult(records=tuple(records))

    def _set(self, key: str, value: TxnMetadata | None, offset: int | None) -> None:
        if value is None:
            self.txns.pop(key, None)
            self._offsets.pop(key, None)
        else:
            self.txns[key] = value
            if offset is not None:
                self._offsets[key] = offset
        deadline = None if value is None else value.deadline_ms()
        if deadline is None:
            self._timer.cancel(key)
        else:
            self._timer.schedule(key, deadline)

    # ------------------------------------------------------------------ reads (committed view)

    def committed(self, transactional_id: str) -> TxnMetadata | None:
        return self._undo.committed(transactional_id, self.txns.get(transactional_id))  # type: ignore[no-any-return]

    def committed_all(self) -> Iterable[TxnMetadata]:
        if not len(self._undo):
            return list(self.txns.values())
        return list(self._undo.committed_view(self.txns).values())

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partition: TopicPartition) -> ErrorCode:
        """Whether ``partition`` is in the producer's ongoing transaction (Kafka
        ``handleVerifyPartitionsInTransaction``, per partition)."""
        meta = self.committed(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return E.producer_fenced
        if meta.state in PREPARED:
            return E.concurrent_transactions
        if meta.state is S.ONGOING and partition in meta.partitions:
            return E.none
        return E.transaction_abortable

    # ------------------------------------------------------------------ write ops

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None, now_ms: int,
                         new_producer_id: Callable[[], int]) -> Result:
        """InitProducerId with a transactional id (Kafka ``handleInitProducerId``); the caller
        has checked the id is not empty and the timeout is allowed. ``expected``: the producer
        id and epoch the client holds (KIP-360), None for a new producer instance."""
        meta = self.txns.get(transactional_id)
        if meta is None:
            fresh = TxnMetadata(transactional_id, new_producer_id(), 0, timeout_ms, S.EMPTY,
                                last_update_ms=now_ms)
            return _answer(fresh, ProducerIdAndEpoch(E.none, fresh.producer_id, 0))
        if expected is not None and not _expected_producer(meta, expected):
            return CoordinatorResult(response=ProducerIdAndEpoch(E.producer_fenced))
        if meta.state in PREPARED:
            return CoordinatorResult(response=ProducerIdAndEpoch(E.concurrent_transactions))
        if meta.state is S.ONGOING:
            # Abort the zombie's transaction (bumping the epoch fences it) and let the client
            # retry once the abort completes; its retry bumps the epoch again (Kafka).
            return _answer(_fenced_abort(meta, now_ms), ProducerIdAndEpoch(E.concurrent_transactions))
        reset = {"timeout_ms": timeout_ms, "partitions": frozenset(), "start_ms": -1,
                 "last_update_ms": now_ms}
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            # A new producer id; the old one is kept as the previous (a retry names it).
            new = meta.moved_to(S.EMPTY, producer_id=new_producer_id(), producer_epoch=0,
                                prev_producer_id=meta.producer_id,
                                last_producer_epoch=meta.producer_epoch if expected else
                                NO_PRODUCER_EPOCH, **reset)
        elif expected is None:
            new = meta.moved_to(S.EMPTY, producer_epoch=meta.producer_epoch + 1,
                                last_producer_epoch=NO_PRODUCER_EPOCH, **reset)
        elif expected[1] == meta.producer_epoch:
            new = meta.moved_to(S.EMPTY, producer_epoch=meta.producer_epoch + 1,
                                last_producer_epoch=meta.producer_epoch, **reset)
        elif expected[1] == meta.last_producer_epoch:
            # A retry of a bump whose answer was lost: the same answer, no second bump.
            new = meta.moved_to(S.EMPTY, **reset)
        else:
            return CoordinatorResult(response=ProducerIdAndEpoch(E.producer_fenced))
        return _answer(new, ProducerIdAndEpoch(E.none, new.producer_id, new.producer_epoch))

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: frozenset[TopicPartition], now_ms: int,
                       client_tv: int | None = None) -> Result:
        """AddPartitionsToTxn / AddOffsetsToTxn (Kafka ``handleAddPartitionsToTransaction``);
        ``client_tv`` 2 when a transaction-version-2 producer adds them implicitly (Produce
        v12, TxnOffsetCommit v5): recorded with the transaction."""
        meta = self.txns.get(transactional_id)
        error = _check_producer(meta, producer_id, producer_epoch)
        if error is not None or meta is None:
            return CoordinatorResult(response=error)
        if meta.state in PREPARED:
            return CoordinatorResult(response=E.concurrent_transactions)
        if meta.state is S.ONGOING and partitions <= meta.partitions:
            return CoordinatorResult(response=E.none)
        start = now_ms if meta.state is not S.ONGOING else meta.start_ms
        tv = meta.client_tv if client_tv is None else client_tv
        new = meta.moved_to(S.ONGOING, partitions=meta.partitions | partitions, start_ms=start,
                            last_update_ms=now_ms, client_tv=tv)
        if len(encode_value(new)) > self.max_record_bytes:
            return CoordinatorResult(response=E.unknown_server_error)
        return _answer(new, E.none)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int) -> Result:
        """EndTxn v0-4 (Kafka ``endTransaction`` from a client, transaction version 0/1)."""
        meta = self.txns.get(transactional_id)
        error = _check_producer(meta, producer_id, producer_epoch)
        if error is not None or meta is None:
            return CoordinatorResult(response=ProducerIdAndEpoch(error or E.invalid_producer_id_mapping))
        state = meta.state
        done = ProducerIdAndEpoch(E.none, meta.producer_id, meta.producer_epoch)
        if state is S.ONGOING:
            new = meta.moved_to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                                last_update_ms=now_ms)
            return _answer(new, done)
        if (state is S.COMPLETE_COMMIT and commit) or (state is S.COMPLETE_ABORT and not commit):
            return CoordinatorResult(response=done)  # a retry of an EndTxn that completed
        if (state is S.PREPARE_COMMIT and commit) or (state is S.PREPARE_ABORT and not commit):
            return CoordinatorResult(response=ProducerIdAndEpoch(E.concurrent_transactions))
        return CoordinatorResult(response=ProducerIdAndEpoch(E.invalid_txn_state))

    def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   commit: bool, now_ms: int, new_producer_id: Callable[[], int]) -> Result:
        """EndTxn v5 (transaction version 2, KIP-890 part 2; Kafka ``endTransaction`` with
        TV2): every transaction ends with the epoch bumped, so its markers carry an epoch no
        earlier batch has and a zombie of the previous transaction is fenced. The answer carries
        the producer id and epoch of the next transaction (a new producer id with epoch 0 once
        the epoch is exhausted). A retry from the epoch before the bump is answered NONE with the
        current ones once complete; an abort is allowed without a transaction (Empty, or after
        a completed one). As Kafka's table:

            state           abort: retry / current    commit: retry / current
            Empty           FENCED / bump              FENCED / INVALID_TXN_STATE
            CompleteAbort   NONE / bump                INVALID_TXN_STATE
            CompleteCommit  INVALID_TXN_STATE / bump   NONE / INVALID_TXN_STATE
        """
        meta = self.txns.get(transactional_id)
        if meta is None:
            return CoordinatorResult(response=ProducerIdAndEpoch(E.invalid_producer_id_mapping))
        retry_overflow = (meta.prev_producer_id == producer_id and meta.producer_epoch == 0
                          and producer_epoch == EXHAUSTED_EPOCH)
        retry_bump = meta.producer_epoch == producer_epoch + 1
        state = meta.state
        if meta.producer_id != producer_id and not retry_overflow:
            return CoordinatorResult(response=ProducerIdAndEpoch(E.invalid_producer_id_mapping))
        if state in PREPARED:
            valid = retry_bump
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry_bump or retry_overflow or producer_epoch == meta.producer_epoch
        else:
            valid = producer_epoch == meta.producer_epoch
        if not valid:
            return CoordinatorResult(response=ProducerIdAndEpoch(E.producer_fenced))
        retry = retry_bump or retry_overflow
        current: Result = CoordinatorResult(
            response=ProducerIdAndEpoch(E.none, meta.producer_id, meta.producer_epoch))
        invalid: Result = CoordinatorResult(response=ProducerIdAndEpoch(E.invalid_txn_state))
        if state is S.ONGOING:
            return _bumped_end(meta, commit, now_ms, new_producer_id, started=True)
        if state in PREPARED:
            if (state is S.PREPARE_COMMIT) == commit:
                return CoordinatorResult(response=ProducerIdAndEpoch(E.concurrent_transactions))
            return invalid
        if state is S.COMPLETE_COMMIT:
            if commit:
                return current if retry else invalid
            return invalid if retry else _bumped_end(meta, False, now_ms, new_producer_id)
        if state is S.COMPLETE_ABORT:
            if commit:
                return invalid
            return current if retry else _bumped_end(meta, False, now_ms, new_producer_id)
        # Empty
        return invalid if commit else _bumped_end(meta, False, now_ms, new_producer_id)

    def complete(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 prepared: TxnState, now_ms: int) -> Result:
        """After every marker is written: PrepareCommit -> CompleteCommit (or Abort). A no-op
        (answered INVALID_TXN_STATE) if the transaction moved on meanwhile."""
        meta = self.txns.get(transactional_id)
        if (meta is None or meta.state is not prepared or meta.producer_id != producer_id
                or meta.producer_epoch != producer_epoch):
            return CoordinatorResult(response=E.invalid_txn_state)
        target = S.COMPLETE_COMMIT if prepared is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        done = meta.moved_to(target, partitions=frozenset(), last_update_ms=now_ms)
        if meta.next_producer_id != NO_PRODUCER_ID:
            # Transaction version 2 exhausted the epoch: the next transaction's producer id.
            done = replace(done, producer_id=meta.next_producer_id, producer_epoch=0,
                           prev_producer_id=meta.producer_id, next_producer_id=NO_PRODUCER_ID)
        return _answer(done, E.none)

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> Result:
        """Tombstones for ids idle in Empty/Complete* for ``expiration_ms`` (Kafka
        ``removeExpiredTransactionalIds``)."""
        records = tuple(new_tombstone(m.transactional_id) for m in self.txns.values()
                        if m.state in EXPIRABLE and m.last_update_ms <= now_ms - expiration_ms)
        return CoordinatorResult(records=records, response=len(records))


def _answer(meta: TxnMetadata, response: object) -> Result:
    return CoordinatorResult(records=(new_txn_record(meta),), response=response)


def _check_producer(meta: TxnMetadata | None, producer_id: int,
                    producer_epoch: int) -> ErrorCode | None:
    if meta is None or meta.producer_id != producer_id:
        return E.invalid_producer_id_mapping
    if meta.producer_epoch != producer_epoch:
        return E.producer_fenced
    return None


def _bumped_end(meta: TxnMetadata, commit: bool, now_ms: int,
                new_producer_id: Callable[[], int], started: bool = False) -> Result:
    """PrepareCommit/PrepareAbort with the epoch bumped (transaction version 2; Kafka
    ``prepareAbortOrCommit``); a new producer id is reserved when the epoch is exhausted and
    taken at completion. Answered with the next transaction's producer id and epoch."""
    rotate = meta.epoch_exhausted
    next_pid = new_producer_id() if rotate else NO_PRODUCER_ID
    new = meta.moved_to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                        producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                        last_producer_epoch=meta.producer_epoch, next_producer_id=next_pid,
                        client_tv=2, last_update_ms=now_ms,
                        start_ms=meta.start_ms if started else now_ms)
    answer = ProducerIdAndEpoch(E.none, next_pid, 0) if rotate else \
        ProducerIdAndEpoch(E.none, new.producer_id, new.producer_epoch)
    return _answer(new, answer)


def _expected_producer(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
    """Whether the producer id and epoch a client sends in InitProducerId may resume ``meta``
    (Kafka ``isValidProducerId``): its current producer id, or the previous one with an
    exhausted epoch (a retry of the bump that moved to a new producer id)."""
    pid, epoch = expected
    return (meta.producer_id == pid or meta.producer_epoch == NO_PRODUCER_EPOCH
            or (pid == meta.prev_producer_id and epoch >= EXHAUSTED_EPOCH))


def _fenced_abort(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """PrepareAbort with the epoch bumped (Kafka ``prepareFenceProducerEpoch`` then the abort).
    A transaction-version-2 transaction's abort bumps it once more, as every v2 end does, so
    its producer's EndTxn (from the epoch two below) is fenced rather than taken for a retry."""
    bump = 2 if meta.client_tv >= 2 else 1
    epoch = min(meta.producer_epoch + bump, MAX_EPOCH)
    meta.moved_to(S.PREPARE_EPOCH_FENCE)  # checks the move as Kafka's two-step transition
    return meta.moved_to(S.PREPARE_ABORT, producer_epoch=epoch, last_update_ms=now_ms,
                         last_producer_epoch=NO_PRODUCER_EPOCH)
