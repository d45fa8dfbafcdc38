"""Per-key ordering while sharing (share.ordering=key, broker/share/key_order.py) on the sans-IO
SharePartition with a fake clock.

The shell is simulated as in test_share_backoff: read whole log batches from the next fetch
offset, hand their record keys to ``acquire``, acknowledge and complete the write, fire the timer.
Each test checks what consumers would see: which offsets a fetch hands to whom, and when.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig, ConfigError
from broker.group_configs import GroupConfigs
from broker.share.partition import AcquireMode, SharePartition
from broker.share.record_state import RecordState
from persister.api import ReadResult
from protocol.record_batch import crc_ok, iter_batches
from protocol.record_keys import BatchKeys, record_key_hashes, trim_batch
from tests.unit.batches import make_batch
from tests.unit.broker.share.test_partition import ACCEPT, KEY, RELEASE, Config, ack, batch, make

REJECT = 3
RL = AcquireMode.RECORD_LIMIT
BO = AcquireMode.BATCH_OPTIMIZED
LOCK = 30_000
# Ten log batches of ten records: 0-9, ..., 90-99.
LOG = [(b, b + 9) for b in range(0, 100, 10)]


def mod_keys(n: int) -> Callable[[int], int | None]:
    return lambda offset: offset % n


def fetch(p: SharePartition, member: str, now: int, max_records: int = 10,
          key_of: Callable[[int], int | None] = mod_keys(4), mode: AcquireMode = BO,
          log: Sequence[tuple[int, int]] = LOG) -> list[int]:
    """The shell: read from the next fetch offset, pass the keys, acquire; the offsets got."""
    offset = p.next_fetch_offset(now)
    read = [b for b in log if b[1] >= offset]
    if not read:
        return []
    keys = {o: key_of(o) for lo, hi in read for o in range(lo, hi + 1)}
    got = p.acquire(member, read, max_records, max_records, mode, now, fetch_offset=offset,
                    keys=keys)
    return [o for r in got for o in range(r.first_offset, r.last_offset + 1)]


def keyed(start: int = 0, **overrides: object) -> SharePartition:
    settings: dict[str, object] = dict(key_ordering=True, record_lock_duration_ms=LOCK)
    settings.update(overrides)
    return make(start=start, **settings)[0]


def state(p: SharePartition, offset: int) -> tuple[RecordState, int]:
    view = p.offset_view(offset)
    assert view is not None
    return view.state, view.delivery_count


def one(offset: int, t: int) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(offset, offset, (t,))]


def test_one_record_per_key_in_flight_and_other_keys_in_parallel() -> None:
    p = keyed()
    # 4 keys: the first fetch gets the first record of each key, split out of log batch 0-9.
    assert fetch(p, "a", 0) == [0, 1, 2, 3]
    # Nothing else is acquirable while those four are held, whoever asks.
    assert fetch(p, "b", 0) == []
    ack(p, "a", one(1, ACCEPT), 10)
    # Key 1 is free: its next record (5) goes out, to another consumer.
    assert fetch(p, "b", 10) == [5]
    assert fetch(p, "c", 10) == []


def test_next_record_of_a_key_waits_for_accept_or_reject() -> None:
    p = keyed()
    assert fetch(p, "a", 0, key_of=mod_keys(1)) == [0]
    assert fetch(p, "b", 0, key_of=mod_keys(1)) == []
    ack(p, "a", one(0, REJECT), 1)
    assert p.start_offset == 1  # archived, the window moved past it
    assert fetch(p, "b", 2, key_of=mod_keys(1)) == [1]
    ack(p, "b", one(1, ACCEPT), 3)
    assert fetch(p, "a", 4, key_of=mod_keys(1)) == [2]


def test_pending_accept_still_holds_the_key_until_durable() -> None:
    p = keyed()
    assert fetch(p, "a", 0, key_of=mod_keys(1)) == [0]
    out = p.acknowledge("a", one(0, ACCEPT), 1)
    assert out.token is not None
    assert fetch(p, "b", 1, key_of=mod_keys(1)) == []  # write not durable yet
    p.complete_write(out.token, True, 2)
    assert fetch(p, "b", 2, key_of=mod_keys(1)) == [1]


def test_release_redelivers_the_same_record_first() -> None:
    p = keyed()
    assert fetch(p, "a", 0, key_of=mod_keys(2)) == [0, 1]
    ack(p, "a", one(0, RELEASE), 1)
    # Record 0 comes back before 2 (same key); 1 still holds key 1.
    assert fetch(p, "b", 2, key_of=mod_keys(2)) == [0]
    assert state(p, 0) == (RecordState.ACQUIRED, 2)
    ack(p, "b", one(0, ACCEPT), 3)
    assert fetch(p, "b", 4, key_of=mod_keys(2)) == [2]


def test_lock_timeout_and_leaving_member_redeliver_the_same_record_first() -> None:
    p = keyed()
    assert fetch(p, "a", 0, key_of=mod_keys(2)) == [0, 1]
    p.on_timer(LOCK)  # both locks expire
    assert fetch(p, "b", LOCK, key_of=mod_keys(2)) == [0, 1]
    assert [state(p, o)[1] for o in (0, 1)] == [2, 2]
    p.release_member("b", LOCK + 1)
    assert fetch(p, "c", LOCK + 2, key_of=mod_keys(2)) == [0, 1]
    assert [state(p, o)[1] for o in (0, 1)] == [3, 3]


def test_null_keys_are_unordered() -> None:
    p = keyed()
    # Even offsets have no key, odd ones all share one key.
    key_of: Callable[[int], int | None] = lambda o: None if o % 2 == 0 else 7  # noqa: E731
    assert fetch(p, "a", 0, key_of=key_of, mode=RL) == [0, 1, 2, 4, 6, 8, 10, 12, 14, 16]
    assert fetch(p, "b", 0, key_of=key_of, mode=RL) == [18, 20, 22, 24, 26, 28, 30, 32, 34, 36]
    # batch_optimized: MaxRecords is soft, the acquisition ends with its log batch (30-39).
    assert fetch(p, "c", 0, key_of=key_of) == [38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58]


def test_delivery_limit_frees_the_key() -> None:
    p = keyed(delivery_count_limit=2)
    assert fetch(p, "a", 0, key_of=mod_keys(1)) == [0]
    ack(p, "a", one(0, RELEASE), 1)
    assert fetch(p, "a", 2, key_of=mod_keys(1)) == [0]
    ack(p, "a", one(0, RELEASE), 3)  # second delivery released: the limit archives it
    assert p.start_offset == 1 and p.metrics().delivery_limit_archives == 1
    assert fetch(p, "b", 4, key_of=mod_keys(1)) == [1]


def test_backoff_holds_the_key() -> None:
    p = keyed(delivery_backoff_ms=1_000)
    assert fetch(p, "a", 0, key_of=mod_keys(2)) == [0, 1]
    ack(p, "a", one(0, RELEASE), 100)
    ack(p, "a", one(1, ACCEPT), 100)
    # Key 0 waits for record 0's backoff; key 1 moves on meanwhile.
    assert fetch(p, "b", 500, key_of=mod_keys(2)) == [3]
    assert p.next_deadline() == 1_100
    p.on_timer(1_100)
    assert fetch(p, "b", 1_100, key_of=mod_keys(2)) == [0]


def test_per_key_first_delivery_order_with_small_budgets() -> None:
    """Many consumers with MaxRecords 3 over 100 records of 5 keys, random-ish acks."""
    p = keyed(max_record_locks=30)
    first: dict[int, list[int]] = {}
    held: dict[int, int] = {}  # key -> offset in flight
    now = 0
    done: set[int] = set()
    members = ["a", "b", "c"]
    for step in range(400):
        now += 1
        m = members[step % 3]
        for o in fetch(p, m, now, max_records=3, key_of=mod_keys(5), mode=RL):
            k = o % 5
            assert k not in held, f"key {k}: {o} acquired while {held.get(k)} in flight"
            held[k] = o
            seen = first.setdefault(k, [])
            if o not in seen:
                seen.append(o)
        # Acknowledge the lowest held: RELEASE every 4th step, else ACCEPT.
        if held:
            k, o = min(held.items(), key=lambda kv: kv[1])
            view = p.offset_view(o)
            assert view is not None and view.member_id is not None
            t = RELEASE if step % 4 == 0 else ACCEPT
            ack(p, view.member_id, one(o, t), now)
            del held[k]
            if t == ACCEPT:
                done.add(o)
    assert done == set(range(100))
    for k, offsets in first.items():
        assert offsets == sorted(offsets) == list(range(k, 100, 5))


def test_lock_limit_bounds_new_records_walked_over() -> None:
    p = keyed(max_record_locks=8)
    assert fetch(p, "a", 0, max_records=100, mode=RL, key_of=mod_keys(2)) == [0, 1]
    # The window holds 8 offsets (0-7) though only two are acquired.
    assert p.end_offset == 7
    assert fetch(p, "b", 0, max_records=100, mode=RL, key_of=mod_keys(2)) == []
    assert p.end_offset == 7


def test_batch_optimized_takes_a_log_batch_begun_under_the_lock_limit_whole() -> None:
    # Without ordering, a log batch begun under the record-lock limit is acquired whole.
    plain = make(start=0, max_record_locks=8, record_lock_duration_ms=LOCK)[0]
    got = plain.acquire("a", LOG, 100, 100, BO, 0, fetch_offset=0)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 9)]
    # With ordering the window takes the batch whole too, but still one record per key.
    p = keyed(max_record_locks=8)
    assert fetch(p, "a", 0, max_records=100, key_of=mod_keys(2)) == [0, 1]
    assert p.end_offset == 9
    assert fetch(p, "b", 0, max_records=100, key_of=mod_keys(2)) == []  # keys held, no room
    ack(p, "a", one(0, ACCEPT), 1)
    assert fetch(p, "b", 1, max_records=100, key_of=mod_keys(2)) == [2]
    assert p.end_offset == 9


def test_restart_rebuilds_held_keys_from_persisted_state() -> None:
    # Persisted: 0 released after one delivery (AVAILABLE, count 1), 1 accepted, 2-9 new.
    cfg = Config(key_ordering=True, delivery_backoff_ms=1_000, record_lock_duration_ms=LOCK)
    read = ReadResult(ErrorCode.none, state_epoch=2, start_offset=0, state_batches=(
        batch(0, 0, RecordState.AVAILABLE, 1), batch(1, 1, RecordState.ACKNOWLEDGED, 1)))
    p2 = SharePartition.load(KEY, 3, read, cfg, now_ms=0)
    assert isinstance(p2, SharePartition)
    assert p2.unkeyed_ranges() == [(0, 0)]
    p2.register_keys({o: o % 2 for o in range(10)})
    assert p2.unkeyed_ranges() == []
    # Record 0 is in backoff after the restart: key 0 waits for it, key 1 goes on.
    assert fetch(p2, "a", 10, key_of=mod_keys(2)) == [3]
    p2.on_timer(1_000)
    assert fetch(p2, "a", 1_000, key_of=mod_keys(2)) == [0]


def test_live_switch_applies_to_new_acquisitions() -> None:
    p, cfg = make(start=0, record_lock_duration_ms=LOCK)
    keys = {o: 0 for o in range(100)}
    got = p.acquire("a", [(0, 9)], 10, 10, BO, 0, fetch_offset=0, keys=keys)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 9)]  # none: whole batch
    cfg.set(key_ordering=True)
    ack(p, "a", [(0, 9, (ACCEPT,))], 1)
    assert fetch(p, "b", 2, key_of=lambda o: 0) == [10]


def test_key_ordering_without_keys_is_a_shell_bug() -> None:
    p = keyed()
    with pytest.raises(ValueError, match="record keys"):
        p.acquire("a", [(0, 9)], 10, 10, BO, 0, fetch_offset=0)


@pytest.mark.parametrize(("value", "accepted"), [
    ("none", True), ("key", True), ("KEY", False), ("fifo", False), ("", False),
])
def test_share_ordering_config_validation(tmp_path: Path, value: str, accepted: bool) -> None:
    gc = GroupConfigs(tmp_path, BrokerConfig({}))
    assert gc.get("g").ordering == "none"
    if accepted:
        gc.alter("g", {"share.ordering": value})
        assert gc.get("g").ordering == value
        described = {d.name: (d.value, d.source) for d in gc.describe("g")}
        assert described["share.ordering"] == (value, "group")
        assert GroupConfigs(tmp_path, BrokerConfig({})).get("g").ordering == value  # persisted
    else:
        with pytest.raises(ConfigError) as err:
            gc.alter("g", {"share.ordering": value})
        assert "share.ordering" in str(err.value)
        assert gc.overrides("g") == {}


# --------------------------------------------------------------------------- reading the keys


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_record_key_hashes_reads_keys_of_plain_and_compressed_batches(codec: int) -> None:
    data = (make_batch([(b"k1", b"v"), (None, b"v"), (b"k2", b"v")], base_offset=10,
                       compression=codec)
            + make_batch([(b"k1", b"w"), (b"", b"w")], base_offset=13, compression=codec))
    keys = record_key_hashes(data, 11, 1 << 20)
    assert keys == {11: None, 12: hash(b"k2"), 13: hash(b"k1"), 14: hash(b"")}


def test_record_key_hashes_treats_unreadable_batches_as_keyless() -> None:
    good = make_batch([(b"a", b"v")], base_offset=0)
    broken = bytearray(make_batch([(b"b", b"v"), (b"c", b"v")], base_offset=1, compression=1))
    broken[-5:] = b"\xff" * 5  # corrupt the gzip payload
    assert record_key_hashes(good + bytes(broken), 0, 1 << 20) == {0: hash(b"a")}


def test_batch_keys_decodes_lazily_and_matches_the_eager_reader() -> None:
    big_key = b"k" * 300  # a key length over one varint byte
    data = (make_batch([(b"a", b"v"), (big_key, b"v" * 200)], base_offset=0)
            + make_batch([(None, b"v")] * 70, base_offset=2, compression=4))
    lazy = BatchKeys(data, list(iter_batches(data)), 1 << 20)
    assert lazy.get(1) == hash(big_key)
    assert lazy.get(71) is None and lazy.get(500) is None
    assert {o: lazy.get(o) for o in range(72)} == record_key_hashes(data, 0, 1 << 20)


def test_a_fruitless_read_is_not_repeated_until_a_key_may_be_free() -> None:
    p = keyed()
    read = (0, 100, 10, 1 << 20)
    keys = {o: 0 for o in range(100)}
    got = p.acquire("a", LOG, 10, 10, RL, 0, fetch_offset=0, keys=keys, read_key=read)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 0)]
    # That read acquired something, but walked to its end: every free record was taken, so the
    # same read finds nothing more until a key is freed.
    assert p.keyed_idle(read)
    offset = p.next_fetch_offset(0)
    read = (offset, 100, 10, 1 << 20)
    assert p.acquire("b", LOG[offset // 10:], 10, 10, RL, 0, fetch_offset=offset, keys=keys,
                     read_key=read) == []
    assert p.keyed_idle(read)
    assert not p.keyed_idle((offset, 101, 10, 1 << 20))  # more log: read again
    ack(p, "a", one(0, ACCEPT), 1)  # key 0 is free
    assert not p.keyed_idle(read)


def test_trim_batch_keeps_only_the_acquired_span_and_is_a_valid_batch() -> None:
    data = make_batch([(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)], base_offset=40)
    ((pos, h),) = list(iter_batches(data))
    layouts: dict[int, tuple[list[int], list[int]]] = {}
    keys = BatchKeys(data, [(pos, h)], 1 << 20, {}, layouts)
    assert keys.get(43) == hash(b"k3")
    cut = trim_batch(data, pos, h, 43, 45, layouts[40])
    assert cut is not None
    ((pos2, h2),) = list(iter_batches(cut))
    assert crc_ok(cut, pos2, h2)
    assert (h2.base_offset, h2.last_offset, h2.record_count) == (40, 49, 3)
    assert record_key_hashes(cut, 0, 1 << 20) == {o: hash(f"k{o - 40}".encode())
                                                  for o in (43, 44, 45)}
    assert trim_batch(data, pos, h, 40, 49, layouts[40]) is None  # nothing to drop


def test_a_walk_that_took_every_free_record_is_not_repeated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.share.partition_acquire as partition_module

    walks: list[str] = []
    real = partition_module.acquire_keyed

    def counted(*args: object, **kwargs: object) -> object:
        walks.append(str(args[2].member_id))  # the member (the KeyedFetch)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(partition_module, "acquire_keyed", counted)
    p = keyed()
    # Stopped by its budget: records are left, the next fetch walks and gets them.
    assert fetch(p, "a", 0, max_records=2, mode=RL) == [0, 1]
    assert fetch(p, "b", 0, max_records=10, mode=RL) == [2, 3]
    # That walk went to the end of the log taking every free record: the parked fetches an
    # acknowledgement wakes do not walk it again, whoever asks.
    assert walks == ["a", "b"]
    assert fetch(p, "c", 0) == [] and fetch(p, "a", 0) == []
    assert walks == ["a", "b"]
    ack(p, "a", one(1, ACCEPT), 1)  # key 1 is free: walk again
    assert fetch(p, "c", 2) == [5]
    assert walks == ["a", "b", "c"]
    assert fetch(p, "b", 2) == []
    assert walks == ["a", "b", "c"]


def test_an_accept_frees_its_key_at_once_and_only_its_own_entry() -> None:
    from broker.share.inflight import InFlightCache
    from broker.share.key_order import KeyIndex

    index = KeyIndex(InFlightCache())
    index.hold_new(1, 10)
    index.hold_new(2, 11)
    index.release({10: 1, 11: 2, 12: 2, 13: None}, 10, 10)
    assert index.items() == [(2, 11)]
    index.release({12: 2, 13: None}, 12, 13)  # 12 has key 2 but does not hold it: kept
    assert index.items() == [(2, 11)]
    # Through the partition: the walk after the ACCEPT finds key 1 free without a stale entry.
    p = keyed()
    p.key_memo.update({o: o % 4 for o in range(100)})  # as the shell's BatchKeys leaves it
    assert fetch(p, "a", 0) == [0, 1, 2, 3]
    ack(p, "a", one(1, ACCEPT), 1)
    assert 1 not in dict(p._keys.items())
    assert fetch(p, "b", 2) == [5]


def test_the_read_budget_walks_batch_headers_a_few_at_a_time() -> None:
    from broker.share.log_read import read_limit

    raw = [make_batch([(b"k", b"v")] * 10, base_offset=b) for b in range(0, 1000, 10)]
    headers = [next(iter_batches(b))[1] for b in raw]
    asked: list[int] = []

    class Log:
        def batch_headers(self, offset: int, _to: object, max_batches: int) -> list:
            asked.append(max_batches)
            return [h for h in headers if h.last_offset >= offset][:max_batches]

    limit = read_limit
    size = len(raw[0])
    assert limit(Log(), 5, 20, 1 << 30) == 3 * size  # 5 + 10 + 10 records reach 20
    assert asked == [4]  # not the 20 (MaxRecords) batches the budget allowed
    asked.clear()
    assert limit(Log(), 0, 300, 1 << 30) == 30 * size
    assert asked == [4, 16, 64]
    asked.clear()
    assert limit(Log(), 0, 5000, 1 << 30) == 100 * size  # the log ends first
    assert asked == [4, 16, 64, 256]


def test_a_keyed_read_reuses_its_bytes_only_while_the_log_holds_them(tmp_path: Path) -> None:
    from broker.share.log_read import ReadReuse
    from storage.segment_log import LogConfig, PartitionLog

    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    for base in (0, 100, 200):
        lg.append(make_batch([(b"k%d" % (i % 7), b"v") for i in range(100)], base_offset=base), 0)
    reads = ReadReuse()
    size = len(lg.read(0, 1, None).data)  # one batch (KIP-74: the first goes out whole)
    first = reads.read(lg, 10, size, 300)
    assert first == lg.read(10, size, 300).data
    # Another offset of the same first batch, same budget and end: the very same bytes.
    assert reads.read(lg, 60, size, 300) is first
    # A later end the last read did not reach: still the same bytes.
    assert reads.read(lg, 60, size, 400) is first
    # Another budget or first batch: read again.
    assert reads.read(lg, 60, 2 * size, 300) == lg.read(60, 2 * size, 300).data
    assert reads.read(lg, 150, size, 300) == lg.read(150, size, 300).data
    # The log changed under the read (a follower's truncation, then other records): read again.
    again = reads.read(lg, 120, size, 300)
    assert again == lg.read(120, size, 300).data
    lg.truncate_to(100)
    lg.append(make_batch([(b"other", b"w")] * 100, base_offset=100), 0)
    fresh = reads.read(lg, 120, size, 300)
    assert fresh is not again and fresh == lg.read(120, size, 300).data
    assert record_key_hashes(fresh, 100, 1 << 20)[120] == hash(b"other")


def test_a_reused_read_survives_the_log_start_moving_inside_its_first_batch(
        tmp_path: Path) -> None:
    from broker.share.log_read import ReadReuse
    from storage.segment_log import LogConfig, PartitionLog

    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    lg.append(make_batch([(b"k", b"v")] * 100, base_offset=0), 0)
    reads = ReadReuse()
    first = reads.read(lg, 10, 1 << 20, 100)
    lg.delete_records_before(50)  # DeleteRecords: the log starts inside the batch
    assert reads.read(lg, 60, 1 << 20, 100) is first
