"""Transactions seen by a share-partition (broker/share/txn_filter.py) on the sans-IO core.

A small transactional log is simulated here: plain batches, transactional batches per producer,
COMMIT/ABORT markers (one-record control batches), the last stable offset (first offset of the
oldest open transaction) and the aborted-transaction list, as ``broker.log.txn_log`` reports them.
The shell is simulated as in test_share_partition: read whole batches from the next fetch offset
(up to the LSO under read_committed), pass the transactional/control ones, the LSO and the
aborted list to ``acquire``. Each test checks which offsets a consumer would get.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.share.acquisition import log_spans
from broker.share.partition import AcquireMode, SharePartition
from broker.share.record_state import RecordState
from broker.share.txn_filter import CONTROL, TRANSACTIONAL, TxnBatch, skip_ranges
from tests.unit.broker.share.test_partition import ACCEPT, RELEASE, ack, make

BO = AcquireMode.BATCH_OPTIMIZED
RL = AcquireMode.RECORD_LIMIT
AV, AQ, AK, AR = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                  RecordState.ARCHIVED)


@dataclass(frozen=True)
class Aborted:
    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class TxnLog:
    """Batches (base, last, producer id, attributes) plus the transaction bookkeeping."""

    batches: list[tuple[int, int, int, int]] = field(default_factory=list)
    open: dict[int, int] = field(default_factory=dict)  # producer -> first offset
    aborted: list[Aborted] = field(default_factory=list)
    # offset -> "data" (plain or committed), "aborted", "marker", "open"
    kind: dict[int, str] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else 0

    @property
    def lso(self) -> int:
        return min(self.open.values(), default=self.end)

    def _append(self, n: int, pid: int, attrs: int, kind: str) -> tuple[int, int]:
        base = self.end
        self.batches.append((base, base + n - 1, pid, attrs))
        for o in range(base, base + n):
            self.kind[o] = kind
        return base, base + n - 1

    def plain(self, n: int) -> tuple[int, int]:
        return self._append(n, -1, 0, "data")

    def txn(self, pid: int, n: int) -> tuple[int, int]:
        self.open.setdefault(pid, self.end)
        return self._append(n, pid, TRANSACTIONAL, "open")

    def end_txn(self, pid: int, commit: bool) -> int:
        first = self.open.pop(pid)
        marker, _ = self._append(1, pid, TRANSACTIONAL | CONTROL, "marker")
        for b, last, p, attrs in self.batches:
            if p == pid and b >= first and not attrs & CONTROL:
                for o in range(b, last + 1):
                    self.kind[o] = "data" if commit else "aborted"
        if not commit:
            self.aborted.append(Aborted(pid, first, marker))
        return marker


def fetch(p: SharePartition, log: TxnLog, member: str, now: int, max_records: int = 500,
          mode: AcquireMode = BO, batch_size: int = 500) -> list[int]:
    """The shell (partition_manager.acquire): read, filter inputs, acquire; the offsets got.

    It reads to the log end even under read_committed (the real shell stops at the LSO), so the
    tests check that the partition itself never acquires from the LSO on.
    """
    offset = p.next_fetch_offset(now)
    end = log.lso if p.read_committed else log.end
    read = [b for b in log.batches if b[1] >= offset]
    if not read:
        return []
    bounds = [(b, last) for b, last, _p, _a in read]
    txn = [TxnBatch(*b) for b in read if b[3] & (TRANSACTIONAL | CONTROL)]
    aborted = [a for a in log.aborted if a.last_offset >= bounds[0][0]
               and a.first_offset <= bounds[-1][1]]
    got = p.acquire(member, bounds, max_records, batch_size, mode, now, fetch_offset=offset,
                    txn_batches=txn, stable_end=end, aborted=aborted)
    return [o for r in got for o in range(r.first_offset, r.last_offset + 1)]


def accept(p: SharePartition, member: str, offsets: list[int], now: int) -> None:
    for o in offsets:
        assert not ack(p, member, [(o, o, (ACCEPT,))], now).error


def rc(start: int = 0, **overrides: object) -> SharePartition:
    return make(start=start, read_committed=True, **overrides)[0]


def state(p: SharePartition, offset: int) -> RecordState | None:
    view = p.offset_view(offset)
    return None if view is None else view.state


# --------------------------------------------------------------------------- skip_ranges


def test_skip_ranges_markers_always_aborted_only_when_read_committed() -> None:
    bounds = [(0, 4), (5, 5), (6, 9), (10, 10), (12, 14)]
    txn = [TxnBatch(0, 4, 7, TRANSACTIONAL), TxnBatch(5, 5, 7, TRANSACTIONAL | CONTROL),
           TxnBatch(6, 9, 8, TRANSACTIONAL), TxnBatch(10, 10, 8, TRANSACTIONAL | CONTROL)]
    aborted = [Aborted(7, 0, 5)]
    # read_uncommitted: only the markers; the marker at 10 takes the compacted 11 with it.
    assert skip_ranges(bounds, txn, None) == [(5, 5), (10, 11)]
    # read_committed: producer 7's batch 0-4 is aborted (merged with its marker); 8 committed.
    assert skip_ranges(bounds, txn, aborted) == [(0, 5), (10, 11)]


def test_skip_ranges_match_producer_and_transaction_bounds() -> None:
    bounds = [(0, 1), (2, 3), (4, 4), (5, 6), (7, 7)]
    txn = [TxnBatch(0, 1, 1, TRANSACTIONAL), TxnBatch(2, 3, 2, TRANSACTIONAL),
           TxnBatch(4, 4, 1, TRANSACTIONAL | CONTROL), TxnBatch(5, 6, 1, TRANSACTIONAL),
           TxnBatch(7, 7, 1, TRANSACTIONAL | CONTROL)]
    # Producer 1 aborted 0..4 then committed 5..7; producer 2's batch inside 0..4 is not its.
    assert skip_ranges(bounds, txn, [Aborted(1, 0, 4)]) == [(0, 1), (4, 4), (7, 7)]
    # A non-transactional batch of an aborted producer id is never aborted.
    assert skip_ranges([(0, 3)], [TxnBatch(0, 3, 1, 0)], [Aborted(1, 0, 9)]) == []


def test_log_spans_cut_by_skips() -> None:
    assert log_spans([(0, 4), (5, 5), (6, 9)], 0, None, [(5, 5)]) == [(0, 4), (6, 9)]
    assert log_spans([(0, 9)], 2, 8, [(0, 3), (7, 20)]) == [(4, 6)]
    assert log_spans([(0, 9)], 0, None, [(0, 9)]) == []


# --------------------------------------------------------------------------- behaviour


def test_read_committed_delivers_committed_archives_aborted_and_markers() -> None:
    log = TxnLog()
    log.txn(1, 3)            # 0-2 committed
    log.end_txn(1, True)     # 3 COMMIT
    log.txn(1, 2)            # 4-5 aborted
    log.end_txn(1, False)    # 6 ABORT
    log.plain(2)             # 7-8
    p = rc()
    got = fetch(p, log, "a", 0)
    assert got == [0, 1, 2, 7, 8]
    assert [state(p, o) for o in (3, 4, 5, 6)] == [AR] * 4
    accept(p, "a", got, 1)
    assert p.start_offset == 9
    # The archived offsets were never acquired, so nothing is left in flight for them.
    assert p.metrics().acquired_records == 0


def test_read_uncommitted_delivers_aborted_data_but_never_markers() -> None:
    log = TxnLog()
    log.txn(1, 3)
    log.end_txn(1, False)    # 3 ABORT
    log.txn(2, 2)            # 4-5 still open
    p, _ = make(start=0)
    got = fetch(p, log, "a", 0)
    assert got == [0, 1, 2, 4, 5]
    assert state(p, 3) is AR
    accept(p, "a", got, 1)
    assert p.start_offset == 6


def test_open_transaction_holds_progress_until_it_ends() -> None:
    log = TxnLog()
    log.plain(2)             # 0-1
    log.txn(1, 2)            # 2-3 open
    log.plain(2)             # 4-5: past the LSO
    p = rc()
    assert fetch(p, log, "a", 0) == [0, 1]
    accept(p, "a", [0, 1], 1)
    assert fetch(p, log, "a", 2) == []        # held at the open transaction's first offset
    assert p.start_offset == 2
    log.end_txn(1, True)     # 6 COMMIT
    assert fetch(p, log, "a", 3) == [2, 3, 4, 5]
    accept(p, "a", [2, 3, 4, 5], 4)
    assert p.start_offset == 7


def test_open_transaction_that_aborts_is_never_delivered() -> None:
    log = TxnLog()
    log.txn(1, 2)            # 0-1
    log.plain(1)             # 2
    p = rc()
    assert fetch(p, log, "a", 0) == []
    log.end_txn(1, False)    # 3 ABORT
    assert fetch(p, log, "a", 1) == [2]
    accept(p, "a", [2], 2)
    assert p.start_offset == 4


def test_only_markers_read_moves_the_start_offset_and_writes_it() -> None:
    log = TxnLog()
    log.txn(1, 2)
    p, _ = make(start=0)
    assert fetch(p, log, "a", 0) == [0, 1]
    accept(p, "a", [0, 1], 1)
    log.end_txn(1, True)     # 2 COMMIT, alone in the next read
    assert fetch(p, log, "a", 2) == []
    assert p.start_offset == 3
    write = p.take_archive_write()
    assert write is not None and write.start_offset == 3
    assert p.take_archive_write() is None
    assert p.is_settled()


def test_interleaved_producers_only_the_aborted_producer_is_archived() -> None:
    log = TxnLog()
    log.txn(1, 2)            # 0-1 producer 1 (aborted)
    log.txn(2, 2)            # 2-3 producer 2 (committed)
    log.end_txn(1, False)    # 4 ABORT 1
    log.end_txn(2, True)     # 5 COMMIT 2
    p = rc()
    assert fetch(p, log, "a", 0) == [2, 3]
    assert p.start_offset == 2            # 0-1 archived (and trimmed), 2-3 in flight
    assert [state(p, o) for o in (4, 5)] == [AR] * 2


def test_live_switch_applies_to_released_records() -> None:
    log = TxnLog()
    log.txn(1, 3)            # 0-2 aborted
    log.end_txn(1, False)    # 3 ABORT
    log.plain(2)             # 4-5
    p, cfg = make(start=0)
    assert fetch(p, log, "a", 0) == [0, 1, 2, 4, 5]   # read_uncommitted
    assert not ack(p, "a", [(0, 2, (RELEASE,)), (4, 5, (RELEASE,))], 1).error
    cfg.set(read_committed=True)
    assert fetch(p, log, "b", 2) == [4, 5]            # aborted ones are not handed out again
    assert p.start_offset == 4                         # 0-3 archived
    accept(p, "b", [4, 5], 3)
    assert p.start_offset == 6
    # And back: read_uncommitted again only changes new acquisitions.
    cfg.set(read_committed=False)
    log.txn(2, 1)            # 6 open
    assert fetch(p, log, "b", 4) == [6]


def test_switch_to_read_committed_leaves_acquired_records_with_their_owner() -> None:
    log = TxnLog()
    log.txn(1, 2)
    log.end_txn(1, False)    # 2 ABORT
    p, cfg = make(start=0)
    assert fetch(p, log, "a", 0) == [0, 1]
    cfg.set(read_committed=True)
    assert fetch(p, log, "b", 1) == []
    assert [state(p, o) for o in (0, 1)] == [AQ, AQ]
    accept(p, "a", [0, 1], 2)
    assert p.start_offset == 3


def test_record_limit_and_budget_around_skipped_batches() -> None:
    log = TxnLog()
    log.txn(1, 3)            # 0-2 aborted
    log.end_txn(1, False)    # 3
    log.plain(4)             # 4-7
    log.txn(2, 1)            # 8
    log.end_txn(2, True)     # 9
    log.plain(2)             # 10-11
    p = rc()
    assert fetch(p, log, "a", 0, max_records=2, mode=RL) == [4, 5]
    # The skipped batches before the cut are archived; those past it are left for later.
    assert p.start_offset == 4             # 0-3 archived (and trimmed)
    assert state(p, 9) is None
    assert fetch(p, log, "a", 1, max_records=3, mode=RL) == [6, 7, 8]
    assert fetch(p, log, "a", 2, max_records=10, mode=RL) == [10, 11]
    assert state(p, 9) is AR
    accept(p, "a", [4, 5, 6, 7, 8, 10, 11], 3)
    assert p.start_offset == 12


def test_key_ordering_with_read_committed() -> None:
    log = TxnLog()
    log.txn(1, 2)            # 0-1 aborted
    log.end_txn(1, False)    # 2
    log.plain(2)             # 3-4
    log.txn(2, 1)            # 5 open
    p = rc(key_ordering=True)
    offset = p.next_fetch_offset(0)
    read = [b for b in log.batches if b[1] >= offset and b[0] < log.lso]
    bounds = [(b, last) for b, last, _p, _a in read]
    keys = {o: o for o in range(0, 6)}
    got = p.acquire("a", bounds, 10, 10, BO, 0, fetch_offset=offset,
                    txn_batches=[TxnBatch(*b) for b in read if b[3]], stable_end=log.lso,
                    aborted=log.aborted, keys=keys)
    assert [o for r in got for o in range(r.first_offset, r.last_offset + 1)] == [3, 4]
    assert p.start_offset == 3             # 0-2 archived (and trimmed)


# --------------------------------------------------------------------------- property

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.integers(1, 4)),
        st.tuples(st.just("txn"), st.integers(1, 3), st.integers(1, 4)),
        st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("fetch"), st.integers(1, 12), st.sampled_from([BO, RL]),
                  st.integers(1, 6), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, release=st.booleans())
def test_read_committed_never_delivers_aborted_unstable_or_markers(
    ops: list[tuple], release: bool
) -> None:
    """Any mix of committed, aborted and open transactions: every read_committed acquisition is
    below the LSO and holds only committed data; once every transaction ended and everything is
    accepted, each committed data offset was acquired, exactly once if nothing was released."""
    log = TxnLog()
    p = rc()
    now = 0
    times: dict[int, int] = {}

    def one_fetch(max_records: int, mode: AcquireMode, batch_size: int, keep: bool) -> list[int]:
        nonlocal now
        now += 1
        lso = log.lso
        got = fetch(p, log, "m", now, max_records, mode, batch_size)
        for o in got:
            assert o < lso, f"offset {o} acquired at or past the LSO {lso}"
            assert log.kind[o] == "data", f"offset {o} is {log.kind[o]}"
            times[o] = times.get(o, 0) + 1
        if got and release and not keep:
            assert not ack(p, "m", [(got[0], got[0], (RELEASE,))], now).error
            got = got[1:]
        accept(p, "m", got, now)
        return got

    for op in ops:
        if op[0] == "plain":
            log.plain(op[1])
        elif op[0] == "txn":
            log.txn(op[1], op[2])
        elif op[0] == "end":
            if op[1] in log.open:
                log.end_txn(op[1], op[2])
        else:
            one_fetch(op[1], op[2], op[3], op[4])
    for pid in sorted(log.open):
        log.end_txn(pid, pid % 2 == 0)
    for _ in range(4 * (log.end + 1)):
        one_fetch(7, BO, 3, True)
        if p.start_offset == log.end:
            break
    committed = {o for o, k in log.kind.items() if k == "data"}
    assert set(times) == committed
    if not release:
        assert all(n == 1 for n in times.values()), times
    assert p.start_offset == log.end


def test_response_leaves_out_batches_holding_no_acquired_offset() -> None:
    """The shell sends only the log batches holding acquired offsets once a read had markers or
    aborted batches, so consumers never decode records they would drop."""
    from broker.share.acquisition import AcquiredRecords
    from broker.share.log_read import covering_batches
    from protocol.record_batch import iter_batches
    from tests.unit.batches import make_batch

    b0 = make_batch([(None, b"x")] * 3, base_offset=0)
    b1 = make_batch([(None, b"y")] * 2, base_offset=3, attributes=TRANSACTIONAL, producer_id=5)
    b2 = make_batch([(None, b"m")], base_offset=5, attributes=TRANSACTIONAL | CONTROL,
                    producer_id=5)
    b3 = make_batch([(None, b"z")] * 2, base_offset=6)
    data = b0 + b1 + b2 + b3
    headers = list(iter_batches(data))
    got = covering_batches(
        data, headers, [AcquiredRecords(0, 2, 1), AcquiredRecords(6, 7, 1)])
    assert got == b0 + b3
    got = covering_batches(data, headers, [AcquiredRecords(3, 4, 1)])
    assert got == b1


def test_read_budget_is_not_spent_on_markers_or_aborted_batches() -> None:
    """The shell sizes a read by MaxRecords; batches that will not be delivered must not count,
    or a read_committed fetch over an aborted batch comes back half full."""
    from broker.share.log_read import read_limit
    from broker.share.txn_filter import aborted_by_producer
    from protocol.record_batch import parse_header
    from tests.unit.batches import make_batch

    raw = [make_batch([(None, b"x")] * 3, base_offset=0),
           make_batch([(None, b"y")] * 2, base_offset=3, attributes=TRANSACTIONAL, producer_id=5),
           make_batch([(None, b"m")], base_offset=5, attributes=TRANSACTIONAL | CONTROL,
                      producer_id=5),
           make_batch([(None, b"z")] * 2, base_offset=6)]
    headers = [parse_header(b) for b in raw]

    class Log:
        def batch_headers(self, offset: int, _to: object, max_batches: int) -> list:
            return [h for h in headers if h.last_offset >= offset][:max_batches]

    size = [len(b) for b in raw]
    limit = read_limit
    # read_uncommitted: the aborted batch is delivered and counts; 3 + 2 records reach 4.
    assert limit(Log(), 0, 4, 1 << 20) == size[0] + size[1]
    # read_committed: it and the marker are read along but 4 records need the last batch too.
    aborted = aborted_by_producer([Aborted(5, 3, 5)])
    assert limit(Log(), 0, 4, 1 << 20, aborted) == sum(size)
