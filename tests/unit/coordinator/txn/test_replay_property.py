"""Property: replaying the __transaction_state records gives the same state.

A Hypothesis state machine drives a ``TxnShard`` with InitProducerId, AddPartitions, EndTxn
(v0-4 and transaction version 2's v5, with implicit additions),
marker completion, time passing (timeouts) and id expiration, for a few ids and producers
(current, fenced, unknown). Invariants after every step: each written state follows Kafka's
transition table, and a shard rebuilt from the encoded log equals the live one (states and
timeout deadlines), hearing exactly the transactions still prepared.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode as E

from coordinator.txn.metadata import PREPARED, VALID_PREVIOUS, TxnMetadata
from tests.unit.coordinator.txn.support import TxnContext

IDS = st.sampled_from(["a", "b", "c"])
PARTS = st.frozensets(st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 2)), min_size=1,
                      max_size=3)


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ctx = TxnContext()
        self.producers: dict[str, tuple[int, int]] = {}
        self.seen: dict[str, TxnMetadata] = {}

    def _who(self, txn: str, stale: bool) -> tuple[int, int]:
        pid, epoch = self.producers.get(txn, (1, 0))
        return (pid, epoch - 1) if stale else (pid, epoch)

    def _check_written(self) -> None:
        for txn, meta in self.ctx.shard.txns.items():
            old = self.seen.get(txn)
            if old is not None and old != meta:
                assert old.state in VALID_PREVIOUS[meta.state], (old, meta)
        self.seen = dict(self.ctx.shard.txns)

    @rule(txn=IDS, timeout=st.sampled_from([100, 1000, 60_000]), resume=st.booleans())
    def init(self, txn: str, timeout: int, resume: bool) -> None:
        expected = self.producers.get(txn) if resume else None
        out = self.ctx.init(txn, timeout, expected)
        if out.error is E.none:
            self.producers[txn] = (out.producer_id, out.producer_epoch)
        self._check_written()

    @rule(txn=IDS, parts=PARTS, stale=st.booleans())
    def add(self, txn: str, parts: frozenset[tuple[str, int]], stale: bool) -> None:
        self.ctx.add(txn, *self._who(txn, stale), *parts)
        self._check_written()

    @rule(txn=IDS, commit=st.booleans(), stale=st.booleans())
    def end(self, txn: str, commit: bool, stale: bool) -> None:
        self.ctx.end(txn, *self._who(txn, stale), commit)
        self._check_written()

    @rule(txn=IDS, commit=st.booleans(), stale=st.booleans())
    def end_v2(self, txn: str, commit: bool, stale: bool) -> None:
        """EndTxn v5 (transaction version 2): the epoch is bumped; the producer takes it."""
        pid, epoch = self._who(txn, stale)
        out = self.ctx.run(self.ctx.shard.end_txn_v2(txn, pid, epoch, commit, self.ctx.now,
                                                     self.ctx.next_pid))
        if out.error is E.none and not stale:
            self.producers[txn] = (out.producer_id, out.producer_epoch)
        self._check_written()

    @rule(txn=IDS, parts=PARTS, stale=st.booleans())
    def add_implicitly(self, txn: str, parts: frozenset[tuple[str, int]], stale: bool) -> None:
        """A transaction-version-2 producer's partitions, added by Produce v12."""
        pid, epoch = self._who(txn, stale)
        self.ctx.run(self.ctx.shard.add_partitions(txn, pid, epoch, parts, self.ctx.now, 2))
        self._check_written()

    @rule()
    def markers_written(self) -> None:
        self.ctx.complete_prepared()
        self._check_written()

    @rule(ms=st.sampled_from([1, 50, 500, 5000]))
    def time_passes(self, ms: int) -> None:
        self.ctx.sleep(ms)
        self._check_written()

    @rule(expiration=st.sampled_from([10, 10_000]))
    def expire(self, expiration: int) -> None:
        self.ctx.run(self.ctx.shard.expire_transactional_ids(self.ctx.now, expiration))
        self._check_written()

    @invariant()
    def replay_gives_the_same_state(self) -> None:
        shard = self.ctx.reloaded()
        assert shard.txns == self.ctx.shard.txns
        assert shard.next_deadline() == self.ctx.shard.next_deadline()
        assert sorted(m.transactional_id for m in self.ctx.reload_heard) == sorted(
            t for t, m in self.ctx.shard.txns.items() if m.state in PREPARED)


TxnMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestTxnReplay = TxnMachine.TestCase
