"""SharePartition under random interleavings of everything the shell can do to it.

A Hypothesis ``RuleBasedStateMachine`` with three members drives acquire (both modes, any
MaxRecords/BatchSize), acknowledgements (ACCEPT/RELEASE/REJECT/GAP/RENEW, whole or per offset,
valid or not), write completion (success or failure, in any order), the clock with lock
expiry, session release and log start movement. After every step it compares the previous and
current per-offset snapshots and checks the invariants of the module docstring:

- a record is held by at most one member, and an ACQUIRED record never changes owner in place;
- delivery counts never decrease, only grow by one on AVAILABLE -> ACQUIRED, never pass the
  limit;
- every state change is in ``LEGAL_TRANSITIONS``; a pending ack never shows as committed;
- the SPSO never moves past a record that did not legally become terminal in that step;
- cached batches are disjoint, and acquired ranges are disjoint and really acquired;
- a rejected acknowledgement changes nothing; writes carry only persisted states;
- with a redelivery backoff (drawn per run, changed live): a record that went back to AVAILABLE
  after delivery n at time t is never acquired again before t + min(max, backoff *
  multiplier^(n-1)) (computed here, independently of broker/share/backoff.py), and the next fetch
  offset never points at a record still in backoff.

Successful writes are applied to a model of the share coordinator (``combine_state_batches``,
start offset never moving back), with fire-and-forget writes failing at random. Durability
checks: the durable start offset never passes the live one, nothing durable as done is undone in
memory, every committed ACCEPT/REJECT/GAP is durable, durable delivery counts never exceed the
live ones, and the durable state always loads.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from kio.schema.errors import ErrorCode

from broker.share.partition import AcquireMode, OffsetView, SharePartition
from broker.share.record_state import LEGAL_TRANSITIONS, AckType, RecordState
from coordinator.share.batch_combiner import combine_state_batches
from persister.api import PERSISTED_STATES, PersisterStateBatch, ReadResult, WriteParams
from tests.unit.broker.share.test_partition import KEY, Config, batch, make

MEMBERS = ("m1", "m2", "m3")
LOCK_MS = 1_000
AQ = RecordState.ACQUIRED
ACK_TYPES = [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP, AckType.RENEW]


# (share.delivery.backoff.ms, .max.ms, .multiplier): off half the time, else around the lock.
BACKOFFS = st.one_of(
    st.just((0, 60_000, 2.0)),
    st.tuples(st.sampled_from([1, 300, 1_000]), st.sampled_from([500, 2_500]),
              st.sampled_from([1.0, 2.0, 3.5])),
)


class SharePartitionMachine(RuleBasedStateMachine):
    p: SharePartition
    cfg: Config

    @initialize(
        sizes=st.lists(st.integers(1, 6), min_size=3, max_size=12),
        limit=st.integers(2, 5),
        locks=st.integers(4, 40),
        opt_in=st.booleans(),
        gap=st.booleans(),
        backoff=BACKOFFS,
    )
    def setup(self, sizes: list[int], limit: int, locks: int, opt_in: bool, gap: bool,
              backoff: tuple[int, int, float]) -> None:
        self.limit = limit
        persisted = [batch(3, 5, RecordState.ACKNOWLEDGED, 1),
                     batch(8, 9, RecordState.AVAILABLE, 1)] if gap else []
        self.p, self.cfg = make(
            start=0, batches=persisted, delivery_count_limit=limit, max_record_locks=locks,
            record_lock_duration_ms=LOCK_MS, count_only_inflight_toward_lock_limit=opt_in,
            delivery_backoff_ms=backoff[0], delivery_backoff_max_ms=backoff[1],
            delivery_backoff_multiplier=backoff[2],
        )
        # Offset -> earliest time it may be acquired again (redelivery backoff model).
        self.not_before: dict[int, int] = {}
        self.log: list[tuple[int, int]] = []
        pos = 0
        for size in [*sizes, 4]:
            self.log.append((pos, pos + size - 1))
            pos += size
        if gap:  # the persisted window must lie inside the log
            while self.log[-1][1] < 12:
                self.log.append((self.log[-1][1] + 1, self.log[-1][1] + 3))
        self.now = 0
        self.tokens: dict[int, tuple[set[int], WriteParams]] = {}
        self.durable_start = 0
        self.durable: tuple[PersisterStateBatch, ...] = tuple(persisted)
        self.acked: set[int] = set()  # offsets whose terminal ack was committed
        self.log_start_moved = False
        if gap:  # the hole 0-2 was never delivered: the SPSO must wait for it
            assert (self.p.start_offset, self.p.next_fetch_offset()) == (0, 0)
        self.prev: dict[int, OffsetView] = self.p.snapshot()
        self.prev_start = self.p.start_offset
        # Offsets allowed to become terminal (or be passed by the SPSO) in the current step.
        self.may_finish: set[int] = set()
        self.log_start = 0

    # ----------------------------------------------------------------- helpers

    def held_by(self, member: str) -> list[int]:
        return sorted(o for o, v in self.p.snapshot().items()
                      if v.state is AQ and v.member_id == member and v.pending is None)

    def expire_candidates(self, pred: Any) -> set[int]:
        """Offsets a release/expiry may archive now: at the limit or below the SPSO."""
        return {o for o, v in self.prev.items()
                if v.state is AQ and pred(o, v)
                and (v.delivery_count >= self.limit or o < self.p.start_offset)}

    def check_write(self, write: WriteParams | None) -> None:
        if write is None:
            return
        for b in write.state_batches:
            assert b.delivery_state in PERSISTED_STATES
            assert b.first_offset >= write.start_offset
            assert 0 <= b.delivery_count <= self.limit
        assert write.delivery_complete_count >= 0

    def apply(self, write: WriteParams) -> None:
        """The share coordinator applied a write (its merge rules, start never moves back)."""
        self.durable_start = max(self.durable_start, write.start_offset)
        self.durable = combine_state_batches(self.durable + write.state_batches,
                                             self.durable_start)

    def persist(self, write: WriteParams | None, fail: bool) -> None:
        """A fire-and-forget write (timer, release, follow-up): applied, or lost."""
        self.check_write(write)
        if write is None:
            return
        if fail:
            self.p.on_write_failed(write)
        else:
            self.apply(write)

    # ----------------------------------------------------------------- rules

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 12),
          batch_size=st.integers(0, 8), mode=st.sampled_from(list(AcquireMode)),
          reads=st.integers(1, 4))
    def acquire(self, member: str, max_records: int, batch_size: int, mode: AcquireMode,
                reads: int) -> None:
        fo = self.p.next_fetch_offset(self.now)
        at_fo = self.p.offset_view(fo)
        if at_fo is not None and at_fo.state is RecordState.AVAILABLE:
            assert self.not_before.get(fo, 0) <= self.now  # never points at a held record
        read = [b for b in self.log if b[1] >= fo][:reads]
        got = self.p.acquire(member, read, max_records, batch_size, mode, self.now,
                             fetch_offset=fo)
        snap = self.p.snapshot()
        last = -1
        for r in got:
            assert r.first_offset > last and r.first_offset <= r.last_offset
            last = r.last_offset
            for o in range(r.first_offset, r.last_offset + 1):
                assert snap[o].state is AQ and snap[o].member_id == member
                assert snap[o].delivery_count == r.delivery_count
                before = self.prev.get(o)
                assert before is None or before.state is RecordState.AVAILABLE
                assert self.now >= self.not_before.get(o, 0), "acquired during its backoff"

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge(self, member: str, data: st.DataObject) -> None:
        held = self.held_by(member)
        if held and data.draw(st.integers(0, 9)) > 0:
            i = data.draw(st.integers(0, len(held) - 1))
            j = data.draw(st.integers(i, min(len(held) - 1, i + 6)))
            lo, hi = held[i], held[j]
        else:  # anything at all, to exercise the error paths
            lo = data.draw(st.integers(-2, self.log[-1][1] + 2))
            hi = lo + data.draw(st.integers(0, 5))
        if data.draw(st.booleans()):
            types: tuple[int, ...] = (int(data.draw(st.sampled_from(ACK_TYPES))),)
        else:
            types = tuple(int(t) for t in data.draw(
                st.lists(st.sampled_from(ACK_TYPES), min_size=hi - lo + 1, max_size=hi - lo + 1)))
        before = (self.p.snapshot(), self.p.cached_batches(), self.p.start_offset)
        out = self.p.acknowledge(member, [(lo, hi, types)], self.now)
        if out.error != ErrorCode.none:
            assert out.error in (ErrorCode.invalid_record_state, ErrorCode.invalid_request)
            assert out.token is None and out.write is None
            assert (self.p.snapshot(), self.p.cached_batches(), self.p.start_offset) == before
            return
        self.check_write(out.write)
        if out.token is not None:
            assert out.write is not None
            snap, was = self.p.snapshot(), before[0]
            mine = {o for o in range(lo, hi + 1)
                    if o in snap and snap[o].pending is not None and was[o].pending is None}
            self.tokens[out.token] = (mine, out.write)

    @precondition(lambda self: bool(self.tokens))
    @rule(data=st.data(), ok=st.booleans(), fail_follow_up=st.booleans(), defer=st.booleans())
    def complete_write(self, data: st.DataObject, ok: bool, fail_follow_up: bool,
                       defer: bool) -> None:
        token = data.draw(st.sampled_from(sorted(self.tokens)))
        offsets, sent = self.tokens.pop(token)
        if ok:  # respond after commit: the write is durable before the partition hears back
            self.apply(sent)
            self.acked |= {o for o in offsets
                           if (v := self.prev.get(o)) and v.pending in (RecordState.ACKNOWLEDGED,
                                                                         RecordState.ARCHIVED)}
        start = self.p.start_offset
        if ok:
            # Terminal targets finish; a RELEASE below a moved SPSO is archived instead.
            self.may_finish |= {o for o in offsets
                                if (v := self.prev.get(o)) and v.pending is not None
                                and (v.pending.is_terminal or o < self.p.start_offset)}
        else:
            self.may_finish |= self.expire_candidates(
                lambda o, v: o in offsets and v.deadline_ms <= self.now)
        # ``defer``: the start-only follow-up is left to start_write (partition_manager.py).
        self.persist(self.p.complete_write(token, ok, self.now, defer_start=defer),
                     fail_follow_up)
        cur = self.p.snapshot()
        for o in offsets:
            old, new = self.prev[o], cur.get(o)
            assert old.pending is not None
            if new is None:  # trimmed: it must have finished
                assert ok or o in self.may_finish
                continue
            assert new.pending is None
            if ok:
                released_below_start = old.pending is RecordState.AVAILABLE and o < start
                assert new.state is (RecordState.ARCHIVED if released_below_start else old.pending)
            elif old.deadline_ms is not None and old.deadline_ms > self.now:
                assert (new.state, new.member_id, new.deadline_ms) == (
                    AQ, old.member_id, old.deadline_ms)
            else:
                assert new.state in (RecordState.AVAILABLE, RecordState.ARCHIVED)

    @rule(fail=st.booleans())
    def deferred_start_write(self, fail: bool) -> None:
        """The shell's deferred start-offset write after acknowledgements (or nothing)."""
        due = self.p.start_write_due
        write = self.p.start_write()
        assert write is not None or not due
        self.persist(write, fail)
        if write is not None and not fail:
            assert self.durable_start == self.p.start_offset

    @rule(ms=st.integers(1, 1_500), fail=st.booleans())
    def advance_clock(self, ms: int, fail: bool) -> None:
        self.now += ms
        self.may_finish |= self.expire_candidates(
            lambda o, v: v.pending is None and v.deadline_ms <= self.now)
        deadline = self.p.next_deadline()
        if deadline is not None and deadline <= self.now:
            self.persist(self.p.on_timer(self.now), fail)
        nxt = self.p.next_deadline()
        assert nxt is None or nxt > self.now

    @rule(member=st.sampled_from(MEMBERS), fail=st.booleans())
    def release_member(self, member: str, fail: bool) -> None:
        self.may_finish |= self.expire_candidates(
            lambda o, v: v.pending is None and v.member_id == member)
        self.persist(self.p.release_member(member, self.now), fail)
        assert self.held_by(member) == []

    @rule(data=st.data())
    def move_log_start(self, data: st.DataObject) -> None:
        bases = [b for b, _ in self.log if b > self.log_start]
        if not bases or data.draw(st.integers(0, 3)) > 0:
            return
        new = data.draw(st.sampled_from(bases[:3]))
        self.log_start = new
        self.log = [b for b in self.log if b[0] >= new]
        self.log_start_moved = True
        self.may_finish |= set(range(0, new))
        self.p.on_log_start_offset_moved(new)

    @rule(enabled=st.booleans(), locks=st.integers(4, 40), backoff=BACKOFFS)
    def change_group_config(self, enabled: bool, locks: int,
                            backoff: tuple[int, int, float]) -> None:
        self.cfg.set(renew_enabled=enabled, max_record_locks=locks,
                     delivery_backoff_ms=backoff[0], delivery_backoff_max_ms=backoff[1],
                     delivery_backoff_multiplier=backoff[2])

    def backoff_ms(self, delivery_count: int) -> int:
        c = self.cfg.value
        if c.delivery_backoff_ms <= 0:
            return 0
        grown = c.delivery_backoff_ms * c.delivery_backoff_multiplier ** (delivery_count - 1)
        return int(min(c.delivery_backoff_max_ms, grown))

    # ----------------------------------------------------------------- invariants

    @invariant()
    def step_is_legal(self) -> None:
        if not hasattr(self, "p"):
            return
        cur = self.p.snapshot()
        start = self.p.start_offset
        assert start >= self.prev_start
        for o, v in cur.items():
            self.check_offset(o, v, self.prev.get(o), start)
        self.check_spso_moves(cur, start)
        batches = self.p.cached_batches()
        for (_, last, _), (first, _, _) in itertools.pairwise(batches):
            assert last < first
        for first, last, _ in batches:
            assert first <= last
        self.prev, self.prev_start, self.may_finish = cur, start, set()

    def check_offset(self, o: int, v: OffsetView, old: OffsetView | None, start: int) -> None:
        assert 0 <= v.delivery_count <= self.limit
        assert (v.state is AQ) == (v.member_id is not None) == (v.deadline_ms is not None)
        assert v.pending is None or v.state is AQ
        if o < start:
            assert v.state.is_terminal or (v.state is AQ and self.log_start_moved)
        if old is None:
            # New to the cache: acquired now, or an AVAILABLE remainder of a cut log batch.
            assert (v.state, v.delivery_count) in {(AQ, 1), (RecordState.AVAILABLE, 0)}
            return
        if old.state is AQ and v.state is RecordState.AVAILABLE:  # released in this step
            self.not_before[o] = self.now + self.backoff_ms(v.delivery_count)
        if v.state is not old.state:
            assert v.state in LEGAL_TRANSITIONS[old.state]
            assert o in self.may_finish or not v.state.is_terminal or old.state.is_terminal
        if v.delivery_count != old.delivery_count:  # only a delivery counts, by one
            assert (old.state, v.state) == (RecordState.AVAILABLE, AQ)
            assert v.delivery_count == old.delivery_count + 1
        if old.state is AQ and v.state is AQ:
            assert v.member_id == old.member_id  # never two owners

    def check_spso_moves(self, cur: dict[int, OffsetView], start: int) -> None:
        """The SPSO passed, or the trim dropped, only records done or legally finished now."""
        for o, old in self.prev.items():
            if o not in cur or self.prev_start <= o < start:
                assert old.state.is_terminal or o in self.may_finish
        for o in range(self.prev_start, start):
            if o not in self.prev:
                assert o in self.may_finish  # a never-delivered hole is only passed by log start

    @invariant()
    def durable_state_is_safe(self) -> None:
        if not hasattr(self, "p"):
            return
        cur = self.p.snapshot()
        start = self.p.start_offset
        assert self.durable_start <= start
        for b in self.durable:
            for o in range(b.first_offset, b.last_offset + 1):
                live = cur.get(o)
                if live is None:
                    assert o < start  # trimmed after finishing
                    continue
                assert b.delivery_count <= live.delivery_count
                if RecordState(b.delivery_state).is_terminal:
                    assert live.state.is_terminal  # durable "done" is never undone
        durable_done = {o for b in self.durable
                        if RecordState(b.delivery_state).is_terminal
                        for o in range(b.first_offset, b.last_offset + 1)}
        for o in self.acked:
            assert o < self.durable_start or o in durable_done
        reloaded = SharePartition.load(
            KEY, 3, ReadResult(ErrorCode.none, 2, self.durable_start, self.durable), self.cfg,
            now_ms=self.now)
        assert isinstance(reloaded, SharePartition)
        assert reloaded.start_offset <= start
        if self.cfg.value.delivery_backoff_ms > 0:
            # Restart rule: a durable AVAILABLE record that was delivered before is held back
            # from the load, so a fetch right after a restart never gets it.
            held = {o for b in self.durable
                    if b.delivery_state == RecordState.AVAILABLE and b.delivery_count >= 1
                    for o in range(b.first_offset, b.last_offset + 1)}
            fo = reloaded.next_fetch_offset(self.now)
            assert fo not in held
            read = [b for b in self.log if b[1] >= fo]
            got = reloaded.acquire("restarted", read, 1_000, 0, AcquireMode.RECORD_LIMIT,
                                   self.now, fetch_offset=fo)
            assert not any(r.first_offset <= o <= r.last_offset for r in got for o in held)


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
