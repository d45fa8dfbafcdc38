"""One transactional id's transaction state, and the legal moves between states.

Concept (Kafka ``TransactionMetadata``, ``TransactionState``; KIP-98): every transactional id has
one ``TxnMetadata`` value (immutable), rewritten whole by each ``__transaction_state`` record:

    Empty --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
                                     --EndTxn(abort), timeout, re-init--> PrepareAbort --> CompleteAbort
    Empty/CompleteCommit/CompleteAbort --InitProducerId--> Empty (epoch + 1)
    Empty/CompleteCommit/CompleteAbort --EndTxn v5 (abort)--> PrepareAbort (transaction version 2)
    Empty/CompleteCommit/CompleteAbort --expiration--> (tombstone; Dead is never written)

Rule 1: a new state is legal only if the current state is in ``VALID_PREVIOUS[new]`` (Kafka's
``validPreviousStates``); ``check_transition`` raises otherwise (a bug in an op, never input).
Rule 2: PrepareEpochFence and Dead exist for Kafka's state ids and names (DescribeTransactions,
ListTransactions filters) but are never written: fencing writes PrepareAbort with the bumped epoch,
expiring writes a tombstone (as Kafka).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka ``TransactionMetadata.isEpochExhausted``: at Short.MaxValue - 1 the next bump needs a new
# producer id (one epoch is kept for fencing).
MAX_EPOCH = 32767
EXHAUSTED_EPOCH = MAX_EPOCH - 1

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Kafka's transaction states: (id written in the log, name on the wire)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    __hash__ = object.__hash__

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def kafka_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        """Raises:
        ValueError: not one of Kafka's state ids.
        """
        try:
            return _BY_ID[state_id]
        except KeyError:
            raise ValueError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_BY_ID = {s.id: s for s in TxnState}
_BY_NAME = {s.kafka_name: s for s in TxnState}

S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Transaction version 2 (KIP-890) may abort from Empty or a completed state (EndTxn v5).
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT,
                                S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
# States an idle transactional id may expire from (Kafka ``isExpirationAllowed``).
EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransitionError(Exception):
    """An op tried a move the table forbids (a bug, never the client's input)."""


def check_transition(old: TxnState, new: TxnState) -> None:
    """Raises:
    IllegalTransitionError: ``new`` may not follow ``old``.
    """
    if old not in VALID_PREVIOUS[new]:
        raise IllegalTransitionError(f"transaction state {new.kafka_name} may not follow {old.kafka_name}")


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What ``__transaction_state`` holds for one transactional id (Kafka ``TransactionLogValue``).

    ``start_ms`` is -1 when no transaction was ever started since the last InitProducerId;
    ``prev_producer_id``/``next_producer_id``/``client_tv`` exist only in value v1 records
    (tagged fields), -1/-1/0 otherwise.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_tv: int = 0
    # Kafka ``lastProducerEpoch``: the epoch before a client-requested bump, so a retried
    # InitProducerId (its first answer lost) is answered again rather than fenced. Not in any
    # record (as in Kafka): -1 after a reload, and not part of a state's equality.
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)

    def moved_to(self, state: TxnState, **changes: object) -> TxnMetadata:
        """A copy in ``state`` with ``changes`` applied.

        Raises:
            IllegalTransitionError: ``state`` may not follow ``self.state``.
        """
        check_transition(self.state, state)
        return replace(self, state=state, **changes)  # type: ignore[arg-type]

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EXHAUSTED_EPOCH

    def deadline_ms(self) -> int | None:
        """When an Ongoing transaction times out (Kafka: start + transaction.timeout.ms)."""
        return self.start_ms + self.timeout_ms if self.state is S.ONGOING else None
