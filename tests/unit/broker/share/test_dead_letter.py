"""KIP-1191 dead letters in the sans-IO share-partition: the ARCHIVING transitions, the records
handed to the shell, restart, key ordering; the dead-letter record encoding; and a hypothesis
property: every rejected or limit-exhausted record ends ARCHIVED with one dead-letter write per
attempt, never lost across a crash at any point (tests/unit/broker/share/test_partition.py
helpers)."""

from __future__ import annotations

from aiokafka.record.memory_records import MemoryRecords
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.share.dead_letter import (
    HEADER_DELIVERY_COUNT,
    HEADER_GROUP,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_TOPIC,
    REASON_DELIVERY_LIMIT,
    REASON_REJECTED,
    DeadLetterRun,
    dlq_partition,
    dlq_topic_name_problem,
    encode_dead_letters,
    source_records,
    split_runs,
)
from broker.share.partition import AcquireMode, SharePartition
from broker.share.record_state import RecordState
from kio.schema.errors import ErrorCode
from persister.api import PersisterStateBatch, ReadResult, WriteParams
from tests.unit.batches import make_batch
from tests.unit.broker.share.test_partition import (
    ACCEPT,
    AQ,
    AR,
    KEY,
    LOCK,
    REJECT,
    RELEASE,
    Config,
    batch,
    fetch,
    make,
)

AG = RecordState.ARCHIVING
LOG = [(0, 4), (5, 9)]


def ack_with_write(p: SharePartition, member: str, batches: list[tuple[int, int, tuple[int, ...]]],
                   now: int) -> WriteParams:
    out = p.acknowledge(member, batches, now)
    assert out.error == ErrorCode.none and out.token is not None and out.write is not None
    p.complete_write(out.token, True, now)
    return out.write


def state_of(p: SharePartition, offset: int) -> RecordState:
    view = p.offset_view(offset)
    assert view is not None
    return view.state


# --------------------------------------------------------------------------- transitions


def test_reject_goes_through_archiving_and_is_persisted_as_state_3() -> None:
    p, _ = make(start=0, dead_letter=True)
    assert fetch(p, "m", LOG, 0) == [(0, 9, 1)]
    write = ack_with_write(p, "m", [(0, 0, (REJECT,)), (1, 9, (ACCEPT,))], 10)
    # The ack write says ARCHIVING for offset 0; the SPSO stops at it (not terminal yet).
    assert write.start_offset == 0
    assert write.state_batches[0] == PersisterStateBatch(0, 0, int(AG), 1)
    assert state_of(p, 0) is AG and p.start_offset == 0 and p.has_dead_letters
    assert p.metrics().archiving_records == 1
    runs = p.take_dead_letters()
    assert runs == [DeadLetterRun(0, 0, 1, REASON_REJECTED)]
    assert p.take_dead_letters() == [] and not p.has_dead_letters  # handed out once
    assert not p.is_settled()  # a dead letter in flight is not durable yet
    follow = p.complete_dead_letters(runs, 20)
    assert follow is not None
    assert follow.start_offset == 10  # ARCHIVED now: the SPSO moves past the whole window
    assert p.offset_view(0) is None  # done and trimmed
    m = p.metrics()
    assert (m.dead_lettered_records, m.dead_letter_skipped_records, m.archived_records,
            m.archiving_records) == (1, 0, 1, 0)


def test_without_a_dead_letter_topic_reject_archives_at_once_as_in_kafka() -> None:
    p, _ = make(start=0)
    fetch(p, "m", LOG, 0)
    write = ack_with_write(p, "m", [(0, 9, (REJECT,))], 10)
    assert (write.start_offset, write.state_batches) == (10, ())  # all done: SPSO moves
    assert p.start_offset == 10 and not p.has_dead_letters and p.take_dead_letters() == []


def test_release_at_the_delivery_limit_is_dead_lettered_as_exhausted() -> None:
    p, _ = make(start=0, dead_letter=True, delivery_count_limit=2)
    fetch(p, "m", LOG, 0)
    ack_with_write(p, "m", [(0, 9, (RELEASE,))], 10)
    assert fetch(p, "m", LOG, 20) == [(0, 9, 2)]
    write = ack_with_write(p, "m", [(0, 9, (RELEASE,))], 30)
    assert write.state_batches == (PersisterStateBatch(0, 9, int(AG), 2),)
    assert p.take_dead_letters() == [DeadLetterRun(0, 9, 2, REASON_DELIVERY_LIMIT)]
    assert p.metrics().delivery_limit_archives == 10


def test_lock_expiry_at_the_limit_goes_to_archiving_and_frees_the_window_when_done() -> None:
    p, _ = make(start=0, dead_letter=True, delivery_count_limit=1)
    fetch(p, "m", LOG, 0)
    write = p.on_timer(LOCK)
    assert write is not None
    assert write.state_batches == (PersisterStateBatch(0, 9, int(AG), 1),)
    assert fetch(p, "m", LOG, LOCK + 1) == []  # never delivered again
    runs = p.take_dead_letters(max_records=4)  # handed out in slices
    assert runs == [DeadLetterRun(0, 3, 1, REASON_DELIVERY_LIMIT)]
    rest = p.take_dead_letters()
    assert rest == [DeadLetterRun(4, 9, 1, REASON_DELIVERY_LIMIT)]
    p.complete_dead_letters(runs, LOCK + 2)
    assert p.start_offset == 4
    p.complete_dead_letters(rest, LOCK + 3, written=False)  # DLQ topic gone: archived anyway
    assert p.start_offset == 10
    m = p.metrics()
    assert (m.dead_lettered_records, m.dead_letter_skipped_records) == (4, 6)
    assert p.is_settled()


def test_member_leaving_at_the_limit_dead_letters_its_records() -> None:
    p, _ = make(start=0, dead_letter=True, delivery_count_limit=1)
    fetch(p, "m", LOG, 0)
    write = p.release_member("m", 5)
    assert write is not None and write.state_batches[0].delivery_state == int(AG)
    assert p.take_dead_letters() == [DeadLetterRun(0, 9, 1, REASON_DELIVERY_LIMIT)]


def test_failed_append_hands_the_records_out_again() -> None:
    p, _ = make(start=0, dead_letter=True)
    fetch(p, "m", LOG, 0)
    ack_with_write(p, "m", [(2, 3, (REJECT,))], 1)
    runs = p.take_dead_letters()
    p.retry_dead_letters(runs)
    assert p.take_dead_letters() == runs
    assert state_of(p, 2) is AG


def test_failed_ack_write_leaves_the_records_acquired_and_nothing_to_dead_letter() -> None:
    p, _ = make(start=0, dead_letter=True)
    fetch(p, "m", LOG, 0)
    out = p.acknowledge("m", [(0, 0, (REJECT,))], 1)
    assert out.token is not None
    p.complete_write(out.token, False, 1)
    assert state_of(p, 0) is AQ and not p.has_dead_letters


def test_restart_finishes_archiving_with_the_reason_inferred_from_the_count() -> None:
    # What the share coordinator holds after a crash between the DLQ append and the ARCHIVED
    # write: state 3. Count 5 = the limit: exhausted; count 1: rejected (Kafka 4.4's rule).
    p, _ = make(start=0, batches=[batch(0, 1, AG, 1), batch(2, 2, AG, 5),
                                  batch(3, 3, RecordState.ACKNOWLEDGED, 1)], dead_letter=True)
    assert p.start_offset == 0 and p.has_dead_letters
    assert p.take_dead_letters() == [DeadLetterRun(0, 1, 1, REASON_REJECTED),
                                     DeadLetterRun(2, 2, 5, REASON_DELIVERY_LIMIT)]
    assert fetch(p, "m", [(0, 3), (4, 6)], 0) == [(4, 6, 1)]  # ARCHIVING is not redelivered


def test_restart_finishes_archiving_even_if_the_group_dropped_its_dead_letter_topic() -> None:
    p, _ = make(start=0, batches=[batch(0, 0, AG, 1)])  # dead_letter off now
    runs = p.take_dead_letters()
    assert runs == [DeadLetterRun(0, 0, 1, REASON_REJECTED)]
    p.complete_dead_letters(runs, 1, written=False)
    assert p.start_offset == 1


def test_a_dead_lettered_record_frees_its_key() -> None:
    p, _ = make(start=0, dead_letter=True, key_ordering=True)
    keys = {0: 1, 1: 1, 2: 2}
    got = p.acquire("m", [(0, 2)], 10, 10, fetch_mode(), 0, fetch_offset=0, keys=keys)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 0), (2, 2)]
    ack_with_write(p, "m", [(0, 0, (REJECT,))], 1)
    assert state_of(p, 0) is AG  # not ARCHIVED yet, but the key is free already
    offset = p.next_fetch_offset()
    got = p.acquire("m", [(0, 2)], 10, 10, fetch_mode(), 2, fetch_offset=offset, keys=keys)
    assert [(r.first_offset, r.last_offset) for r in got] == [(1, 1)]


def fetch_mode() -> AcquireMode:
    return AcquireMode.RECORD_LIMIT


def test_log_start_moving_past_archiving_records_keeps_them_until_done() -> None:
    p, _ = make(start=0, dead_letter=True)
    fetch(p, "m", LOG, 0)
    ack_with_write(p, "m", [(0, 9, (REJECT,))], 1)
    p.on_log_start_offset_moved(8)
    assert p.start_offset == 8 and p.offset_view(0) is not None  # still cached
    runs = p.take_dead_letters()
    assert runs == [DeadLetterRun(0, 9, 1, REASON_REJECTED)]
    p.complete_dead_letters(runs, 2)
    assert p.start_offset == 10 and p.offset_view(0) is None


# --------------------------------------------------------------------------- records


def test_dead_letter_records_carry_kip_1191_headers_and_payload_only_when_copied() -> None:
    runs = [DeadLetterRun(5, 6, 3, REASON_DELIVERY_LIMIT), DeadLetterRun(9, 9, 1, REASON_REJECTED)]
    data, n = encode_dead_letters("g", "orders", 2, runs, 1_700_000_000_000,
                                  {5: (b"k5", b"v5"), 9: (None, b"v9")})
    assert n == 3
    batch = MemoryRecords(data).next_batch()
    assert batch is not None and batch.validate_crc()
    recs = list(batch)
    assert [r.timestamp for r in recs] == [1_700_000_000_000] * 3
    assert [(r.key, r.value) for r in recs] == [(b"k5", b"v5"), (None, None), (None, b"v9")]
    headers = [dict(r.headers) for r in recs]
    assert headers[0][HEADER_TOPIC] == b"orders" and headers[0][HEADER_PARTITION] == b"2"
    assert [h[HEADER_OFFSET] for h in headers] == [b"5", b"6", b"9"]
    assert {h[HEADER_GROUP] for h in headers} == {b"g"}
    assert [h[HEADER_DELIVERY_COUNT] for h in headers] == [b"3", b"3", b"1"]
    # Kafka 4.4's texts (wire data that tools match on).
    assert headers[0][HEADER_MESSAGE] == b"Offset delivery count exceeded the threshold."
    assert headers[2][HEADER_MESSAGE] == b"Offset rejected by client."
    _, two = encode_dead_letters("g", "orders", 2, runs, 0, None, max_records=2)
    assert two == 2
    assert split_runs(runs, 2) == ([DeadLetterRun(5, 6, 3, REASON_DELIVERY_LIMIT)],
                                   [DeadLetterRun(9, 9, 1, REASON_REJECTED)])


def test_source_records_reads_keys_and_values_of_plain_and_compressed_batches() -> None:
    data = (make_batch([(b"a", b"1"), (None, b"2"), (b"c", None)], base_offset=10)
            + make_batch([(b"d", b"4"), (b"e", b"5")], base_offset=13, compression=1))
    assert source_records(data, 11, 13) == {11: (None, b"2"), 12: (b"c", None),
                                           13: (b"d", b"4")}


def test_dlq_topic_rules_and_partition_choice() -> None:
    assert dlq_topic_name_problem("", "dlq.") is None
    assert dlq_topic_name_problem("dlq.orders", "dlq.") is None
    assert "must start with 'dlq.'" in (dlq_topic_name_problem("orders", "dlq.") or "")
    assert "__" in (dlq_topic_name_problem("__consumer_offsets", "") or "")
    assert dlq_topic_name_problem("anything", "") is None
    assert [dlq_partition(p, 3) for p in range(5)] == [0, 1, 2, 0, 1]


# --------------------------------------------------------------------------- property


class DeadLetterMachine(RuleBasedStateMachine):
    """A share-partition with a DLQ, its persisted state (every write applied at once) and a
    DLQ topic (an append is durable at once). A crash may hit anywhere, including between a
    DLQ append and its ARCHIVED write; the partition is then rebuilt from the persisted state.
    """

    @initialize(limit=st.integers(1, 3))
    def setup(self, limit: int) -> None:
        self.limit = limit
        self.log = [(0, 3), (4, 7), (8, 11)]
        self.cfg = Config(dead_letter=True, delivery_count_limit=limit,
                          record_lock_duration_ms=LOCK)
        self.durable_start = 0
        self.durable: dict[int, tuple[int, int]] = {}  # offset -> (state, count)
        self.p = self.load()
        self.now = 0
        self.dlq: dict[int, int] = {}  # offset -> dead-letter records written
        self.allowed: dict[int, int] = {}  # offset -> dead-letter writes allowed so far
        self.given_up: set[int] = set()  # offsets rejected or exhausted (durably ARCHIVING)

    def load(self) -> SharePartition:
        batches = tuple(PersisterStateBatch(o, o, s, c) for o, (s, c) in sorted(self.durable.items())
                        if o >= self.durable_start)
        p = SharePartition.load(KEY, 3, ReadResult(ErrorCode.none, state_epoch=2,
                                                   start_offset=self.durable_start,
                                                   state_batches=batches), self.cfg)
        assert isinstance(p, SharePartition)
        return p

    def persist(self, write: WriteParams | None) -> None:
        if write is None:
            return
        self.durable_start = max(self.durable_start, write.start_offset)
        for o in [o for o in self.durable if o < self.durable_start]:
            # Below the start offset the coordinator keeps nothing: the record is done. A
            # given-up record may only get there once its dead letter was written.
            if o in self.given_up:
                assert self.dlq.get(o, 0) >= 1, f"offset {o} passed without a dead letter"
            self.durable[o] = (int(AR), self.durable[o][1])
        for b in write.state_batches:
            for o in range(b.first_offset, b.last_offset + 1):
                self.durable[o] = (b.delivery_state, b.delivery_count)
                if b.delivery_state == int(AG) and o not in self.given_up:
                    self.given_up.add(o)
                    self.allowed[o] = 1

    def held(self) -> list[int]:
        return sorted(o for o, v in self.p.snapshot().items()
                      if v.state is AQ and v.member_id == "m" and v.pending is None)

    @rule()
    def fetch(self) -> None:
        self.now += 1
        fetch(self.p, "m", self.log, self.now)

    @precondition(lambda self: bool(self.held()))
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        self.now += 1
        held = self.held()
        offset = data.draw(st.sampled_from(held))
        kind = data.draw(st.sampled_from([ACCEPT, RELEASE, REJECT]))
        out = self.p.acknowledge("m", [(offset, offset, (kind,))], self.now)
        assert out.error == ErrorCode.none and out.token is not None
        self.persist(out.write)
        self.persist(self.p.complete_write(out.token, True, self.now))

    @rule()
    def expire_locks(self) -> None:
        self.now += LOCK
        self.persist(self.p.on_timer(self.now))

    @rule(crash_after_append=st.booleans())
    def dead_letter(self, crash_after_append: bool) -> None:
        runs = self.p.take_dead_letters(max_records=3)
        for run in runs:
            for o in range(run.first_offset, run.last_offset + 1):
                self.dlq[o] = self.dlq.get(o, 0) + 1
        if crash_after_append:
            self.crash()
            return
        self.now += 1
        self.persist(self.p.complete_dead_letters(runs, self.now))

    @rule()
    def crash(self) -> None:
        for o, (state, _count) in self.durable.items():
            if state == int(AG):
                self.allowed[o] += 1  # the load hands it out again: one more attempt
        self.p = self.load()

    @invariant()
    def one_dead_letter_per_attempt(self) -> None:
        for o, n in self.dlq.items():
            assert o in self.given_up and n <= self.allowed[o]

    @invariant()
    def archived_only_after_its_dead_letter(self) -> None:
        for o in self.given_up:
            state = self.durable[o][0]
            assert state in (int(AG), int(AR))
            if state == int(AR):
                assert self.dlq.get(o, 0) >= 1, f"offset {o} archived without a dead letter"

    def teardown(self) -> None:
        # Drain: every given-up record ends ARCHIVED with at least one dead letter.
        for _ in range(20):
            runs = self.p.take_dead_letters()
            if not runs:
                break
            for run in runs:
                for o in range(run.first_offset, run.last_offset + 1):
                    self.dlq[o] = self.dlq.get(o, 0) + 1
            self.persist(self.p.complete_dead_letters(runs, self.now))
        for o in self.given_up:
            assert self.durable[o][0] == int(AR) and self.dlq.get(o, 0) >= 1
        view = self.p.snapshot()
        assert not any(v.state is AG for v in view.values())


TestDeadLetterMachine = DeadLetterMachine.TestCase
TestDeadLetterMachine.settings = settings(max_examples=150, stateful_step_count=30,
                                          deadline=None)


# --------------------------------------------------------------------------- configs


def test_dead_letter_group_configs_default_off_and_check_the_broker_prefix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from broker.config import BrokerConfig, ConfigError
    from broker.group_configs import GroupConfigs

    gc = GroupConfigs(tmp_path, BrokerConfig({}))
    c = gc.get("g")
    assert (c.dlq_topic, c.dlq_copy_record) == ("", False)
    gc.alter("g", {"errors.deadletterqueue.topic.name": "dlq.orders",
                   "errors.deadletterqueue.copy.record.enable": "true"})
    c = gc.get("g")
    assert (c.dlq_topic, c.dlq_copy_record) == ("dlq.orders", True)
    for bad, why in [("orders", "must start with 'dlq.'"), ("dlq.a b", "characters"),
                     ("__consumer_offsets", "must not start with")]:
        with pytest.raises(ConfigError, match=why):
            gc.alter("g", {"errors.deadletterqueue.topic.name": bad})
    assert gc.get("g").dlq_topic == "dlq.orders"  # refused: nothing changed
    gc.alter("g", {"errors.deadletterqueue.topic.name": ""})  # empty = off
    assert gc.get("g").dlq_topic == ""
    (tmp_path / "x").mkdir()
    open_prefix = GroupConfigs(tmp_path / "x", BrokerConfig(
        {"errors.deadletterqueue.topic.name.prefix": ""}))
    open_prefix.alter("g", {"errors.deadletterqueue.topic.name": "orders.dlq"})
    with pytest.raises(ConfigError, match="__"):
        open_prefix.alter("g", {"errors.deadletterqueue.topic.name": "__share_group_state"})


def test_dead_letters_with_backoff_and_renew() -> None:
    from tests.unit.broker.share.test_partition import RENEW

    p, _ = make(start=0, dead_letter=True, delivery_count_limit=2, delivery_backoff_ms=1_000)
    assert fetch(p, "m", [(0, 1)], 0) == [(0, 1, 1)]
    ack_with_write(p, "m", [(0, 1, (RELEASE,))], 10)  # both wait for their backoff
    assert fetch(p, "m", [(0, 1)], 500) == []
    p.on_timer(1_010)  # the backoff ends (the shell's timer)
    assert fetch(p, "m", [(0, 1)], 1_010) == [(0, 1, 2)]
    out = p.acknowledge("m", [(0, 1, (RENEW,))], 1_020)  # RENEW: still ours, nothing to write
    assert out.error == ErrorCode.none and out.token is None and state_of(p, 0) is AQ
    # At the limit a RELEASE dead-letters (no backoff), and a REJECT does too.
    write = ack_with_write(p, "m", [(0, 0, (RELEASE,)), (1, 1, (REJECT,))], 1_030)
    assert write.state_batches == (PersisterStateBatch(0, 1, int(AG), 2),)
    assert p.take_dead_letters() == [DeadLetterRun(0, 0, 2, REASON_DELIVERY_LIMIT),
                                     DeadLetterRun(1, 1, 2, REASON_REJECTED)]
    assert p.next_deadline() is None  # nothing in backoff, no lock


def test_runs_completed_in_pieces_leave_the_partition_settled() -> None:
    # The shell may write only part of what it took (the DLQ topic's max.message.bytes).
    p, _ = make(start=0, dead_letter=True)
    fetch(p, "m", LOG, 0)
    ack_with_write(p, "m", [(0, 9, (REJECT,))], 1)
    head, tail = split_runs(p.take_dead_letters(), 3)
    p.complete_dead_letters(head, 2)
    assert not p.is_settled() and p.start_offset == 3
    p.retry_dead_letters(tail)
    assert p.take_dead_letters() == tail
    p.complete_dead_letters(tail, 3)
    assert p.is_settled() and p.start_offset == 10


def test_archiving_is_written_in_kafkas_share_update_format() -> None:
    """The only thing ARCHIVING adds to __share_group_state is the DeliveryState byte 3 (Kafka
    4.4's value for it) in an ordinary ShareUpdate StateBatch; the bytes are otherwise what
    every Kafka reader of the schema parses, and a later ARCHIVED (4) update wins the merge."""
    from coordinator.share.batch_combiner import combine_state_batches
    from coordinator.share.records import ShareUpdateKey, ShareUpdateValue, StateBatch
    from coordinator.share.serde import decode_value, encode_value

    value = ShareUpdateValue(snapshot_epoch=1, leader_epoch=0, start_offset=10,
                             delivery_complete_count=0,
                             state_batches=(StateBatch(10, 12, int(AG), 2),))
    data = encode_value(value)
    assert data is not None
    # ... | FirstOffset 10 | LastOffset 12 | DeliveryState 3 | DeliveryCount 2 | no tags ...
    batch_bytes = bytes.fromhex("000000000000000a" "000000000000000c" "03" "0002" "00")
    assert batch_bytes in data
    assert decode_value(ShareUpdateKey("g", KEY.topic_id, 0), data) == value
    merged = combine_state_batches((StateBatch(10, 12, int(AG), 2), StateBatch(10, 12, int(AR), 2)),
                                   10)
    assert merged == (StateBatch(10, 12, int(AR), 2),)
    merged = combine_state_batches((StateBatch(10, 12, int(AR), 2), StateBatch(10, 12, int(AG), 2)),
                                   10)
    assert merged == (StateBatch(10, 12, int(AR), 2),)  # whatever order the writes land in
