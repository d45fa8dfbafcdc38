"""Per-key ordering (share.ordering=key) under random interleavings: Hypothesis state machine.

Three members fetch (any MaxRecords, both acquire modes), acknowledge (ACCEPT/RELEASE/REJECT/
RENEW per record), complete writes (success or failure, in any order), move the clock (lock
expiry, backoff ends), leave (session release), and the whole partition is reloaded from the
persisted state as after a crash. Keys are drawn per offset (some null). Either the keys are
handed as a plain mapping, or (``shell_keys``) the log is made of real record batches (some
compressed) read through ``BatchKeys`` as the shell does, batch key sets included. After every
step:

- never two records of one key in flight: at most one record per non-null key is ACQUIRED
  (pending acknowledgements included);
- per-key delivery order equals offset order except redeliveries of the same record: when a
  record is acquired, every lower record of its key is already terminal (acknowledged or
  archived), so the first deliveries of a key come in offset order and a redelivered record
  always comes before any later record of its key;
- every record is eventually accepted when the members keep accepting (checked at teardown);
- a read the partition calls idle (``keyed_idle``, which lets the shell skip it) acquires nothing.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.share.partition import AcquireMode, OffsetView, SharePartition
from broker.share.record_state import AckType, RecordState
from coordinator.share.batch_combiner import combine_state_batches
from persister.api import PersisterStateBatch, ReadResult, WriteParams
from protocol.record_batch import iter_batches
from protocol.record_keys import BatchKeys
from tests.unit.batches import make_batch
from tests.unit.broker.share.test_partition import KEY, Config, make

from kio.schema.errors import ErrorCode

MEMBERS = ("m1", "m2", "m3")
LOCK_MS = 1_000
AQ = RecordState.ACQUIRED
TYPES = [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW]


def key_bytes(key: int | None) -> bytes | None:
    return None if key is None else b"key-%d" % key


class KeyOrderingMachine(RuleBasedStateMachine):
    p: SharePartition
    cfg: Config

    @initialize(
        sizes=st.lists(st.integers(1, 6), min_size=3, max_size=10),
        key_pool=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=60, max_size=60),
        limit=st.integers(2, 5),
        locks=st.integers(3, 40),
        opt_in=st.booleans(),
        backoff=st.sampled_from([0, 0, 300, 1_500]),
        dead_letter=st.booleans(),
        shell_keys=st.booleans(),
        gzip=st.lists(st.booleans(), min_size=10, max_size=10),
    )
    def setup(self, sizes: list[int], key_pool: list[int | None], limit: int, locks: int,
              opt_in: bool, backoff: int, dead_letter: bool, shell_keys: bool,
              gzip: list[bool]) -> None:
        self.log: list[tuple[int, int]] = []
        pos = 0
        for size in sizes:
            self.log.append((pos, pos + size - 1))
            pos += size
        self.keys = {o: key_pool[o] for o in range(pos)}
        # shell_keys: the record batches of the log, keys as the shell hashes them.
        self.shell_keys = shell_keys
        self.batches = [
            make_batch([(key_bytes(key_pool[o]), b"v") for o in range(lo, hi + 1)],
                       base_offset=lo, compression=int(z))
            for (lo, hi), z in zip(self.log, gzip, strict=False)
        ]
        self.hashed = {o: None if k is None else hash(key_bytes(k)) for o, k in self.keys.items()}
        self.p, self.cfg = make(
            start=0, key_ordering=True, delivery_count_limit=limit, max_record_locks=locks,
            record_lock_duration_ms=LOCK_MS, count_only_inflight_toward_lock_limit=opt_in,
            delivery_backoff_ms=backoff, dead_letter=dead_letter,
        )
        self.now = 0
        self.tokens: list[int] = []
        self.durable_start = 0
        self.durable: tuple[PersisterStateBatch, ...] = ()
        self.prev: dict[int, OffsetView] = {}
        # key -> offsets in the order they were first delivered
        self.first_order: dict[int, list[int]] = {}

    # ----------------------------------------------------------------- shell helpers

    def persist(self, write: WriteParams | None, ok: bool = True) -> None:
        if write is None:
            return
        if not ok:
            self.p.on_write_failed(write)
            return
        self.durable_start = max(self.durable_start, write.start_offset)
        self.durable = combine_state_batches(self.durable + write.state_batches,
                                             self.durable_start)

    def fetch(self, member: str, max_records: int, mode: AcquireMode) -> None:
        fo = self.p.next_fetch_offset(self.now)
        read = [b for b in self.log if b[1] >= fo]
        if not read:
            return
        keys: object = self.keys
        if self.shell_keys:
            data = b"".join(b for b, (_lo, hi) in zip(self.batches, self.log, strict=True)
                            if hi >= fo)
            keys = BatchKeys(data, list(iter_batches(data)), 1 << 20, self.p.key_memo,
                             self.p.batch_layouts, self.p.batch_key_sets)
        if self.p.unkeyed_ranges():
            self.p.register_keys(self.hashed if self.shell_keys else self.keys)
        read_key = (fo, self.log[-1][1], max_records, mode)
        idle = self.p.keyed_idle(read_key)
        got = self.p.acquire(member, read, max_records, max_records, mode, self.now,
                             fetch_offset=fo, keys=keys, read_key=read_key)  # type: ignore[arg-type]
        # The shell skips an idle read: doing it anyway must indeed acquire nothing.
        assert not (idle and got), f"keyed_idle said nothing to acquire, got {got}"

    # ----------------------------------------------------------------- rules

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 12),
          mode=st.sampled_from(list(AcquireMode)))
    def acquire(self, member: str, max_records: int, mode: AcquireMode) -> None:
        self.fetch(member, max_records, mode)

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge(self, member: str, data: st.DataObject) -> None:
        held = sorted(o for o, v in self.p.snapshot().items()
                      if v.state is AQ and v.member_id == member and v.pending is None)
        if not held:
            return
        o = data.draw(st.sampled_from(held))
        t = data.draw(st.sampled_from(TYPES))
        out = self.p.acknowledge(member, [(o, o, (int(t),))], self.now)
        assert out.error == ErrorCode.none
        if out.token is not None:
            self.persist(out.write)
            self.tokens.append(out.token)

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        if not self.tokens:
            return
        token = self.tokens.pop(data.draw(st.integers(0, len(self.tokens) - 1)))
        ok = data.draw(st.integers(0, 4)) > 0
        self.persist(self.p.complete_write(token, ok, self.now))

    @rule(ms=st.sampled_from([1, 200, 700, 1_600]))
    def tick(self, ms: int) -> None:
        self.now += ms
        while (d := self.p.next_deadline()) is not None and d <= self.now:
            self.persist(self.p.on_timer(self.now))

    @rule(written=st.booleans(), retry=st.booleans())
    def dead_letters(self, written: bool, retry: bool) -> None:
        """KIP-1191: the shell writes (or gives up on, or fails) the dead letters handed out."""
        runs = self.p.take_dead_letters(max_records=4)
        if retry:
            self.p.retry_dead_letters(runs)
        else:
            self.persist(self.p.complete_dead_letters(runs, self.now, written=written))

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        self.persist(self.p.release_member(member, self.now))

    @rule()
    def crash_and_reload(self) -> None:
        """The broker restarts: rebuild from the durable share state (acquisitions are lost)."""
        self.tokens.clear()
        read = ReadResult(ErrorCode.none, state_epoch=2, start_offset=self.durable_start,
                          state_batches=self.durable)
        loaded = SharePartition.load(KEY, 3, read, self.cfg, now_ms=self.now)
        assert isinstance(loaded, SharePartition)
        self.p = loaded
        self.prev = {}

    # ----------------------------------------------------------------- invariants

    @invariant()
    def ordering(self) -> None:
        if not hasattr(self, "p"):
            return
        snap = self.p.snapshot()
        in_flight: dict[int, int] = {}
        for o, v in snap.items():
            k = self.keys.get(o)
            if v.state is AQ and k is not None:
                assert k not in in_flight, f"key {k}: {in_flight[k]} and {o} both in flight"
                in_flight[k] = o
        start = self.p.start_offset
        for o, v in snap.items():
            k = self.keys.get(o)
            before = self.prev.get(o)
            newly = v.state is AQ and (before is None or before.state is not AQ
                                       or before.delivery_count != v.delivery_count)
            if not newly or k is None:
                continue
            # Every lower record of the key is done: terminal, or ARCHIVING (dead-lettered,
            # never delivered again), or below the SPSO.
            for lower in range(start, o):
                if self.keys.get(lower) != k:
                    continue
                lv = snap.get(lower)
                assert lv is not None and lv.state.is_done, (
                    f"key {k}: {o} acquired while {lower} is {lv}")
            order = self.first_order.setdefault(k, [])
            if o not in order:
                assert not order or order[-1] < o, f"key {k}: first deliveries {order} then {o}"
                order.append(o)
        self.prev = snap

    def teardown(self) -> None:
        """Members that keep accepting drain the partition."""
        if not hasattr(self, "p"):
            return
        for token in self.tokens:
            self.persist(self.p.complete_write(token, True, self.now))
        self.tokens.clear()
        for _ in range(400):
            self.now += LOCK_MS * 2
            while (d := self.p.next_deadline()) is not None and d <= self.now:
                self.persist(self.p.on_timer(self.now))
            runs = self.p.take_dead_letters()
            self.persist(self.p.complete_dead_letters(runs, self.now))
            self.fetch("m1", 12, AcquireMode.RECORD_LIMIT)
            self.ordering()
            held = sorted(o for o, v in self.p.snapshot().items()
                          if v.state is AQ and v.member_id == "m1" and v.pending is None)
            for o in held:
                out = self.p.acknowledge("m1", [(o, o, (int(AckType.ACCEPT),))], self.now)
                assert out.token is not None
                self.persist(self.p.complete_write(out.token, True, self.now))
            if self.p.start_offset > self.log[-1][1]:
                return
        raise AssertionError(f"not drained: SPSO {self.p.start_offset}, "
                             f"{self.p.snapshot()}")


KeyOrderingMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestKeyOrdering = KeyOrderingMachine.TestCase
