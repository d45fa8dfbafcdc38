"""Transactions (KIP-98) against a real broker: the coordinator RPCs over raw wire (Kafka's errors
for bad input, and the broker keeps serving), and confluent-kafka 2.16.1's transactional producer
with read_committed / read_uncommitted consumers, timeouts, fencing and a coordinator restart.

librdkafka 2.16 sends InitProducerId v4, AddPartitionsToTxn v0, AddOffsetsToTxn v0, EndTxn v1
and TxnOffsetCommit v3 (no KIP-890 transaction version 2); aiokafka 0.14 sends v0 of each.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, request

T = 10


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn") / "data",
                      {"transaction.max.timeout.ms": "120000"})
    b.start()
    yield b
    b.stop()


def init_pid(c: RawClient, txn: str, timeout_ms: int = 60_000, version: int = 4,
             pid: int = -1, epoch: int = -1) -> Any:
    return c.call(22, version, request(22, version, transactional_id=txn,
                                       transaction_timeout=timedelta(milliseconds=timeout_ms),
                                       producer_id=pid, producer_epoch=epoch))


def add_parts(c: RawClient, txn: str, pid: int, epoch: int, parts: dict[str, list[int]],
              version: int = 3) -> dict[tuple[str, int], int]:
    m = c.request_module(24, version)
    resp = c.call(24, version, request(
        24, version, v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=tuple(
            m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in parts.items())))
    return {(t.name, r.partition_index): r.partition_error_code
            for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition}


def end_txn(c: RawClient, txn: str, pid: int, epoch: int, commit: bool, version: int = 3) -> Any:
    return c.call(26, version, request(26, version, transactional_id=txn, producer_id=pid,
                                       producer_epoch=epoch, committed=commit))


def describe(c: RawClient, txn: str) -> Any:
    return c.call(65, 0, request(65, 0, transactional_ids=(txn,))).transaction_states[0]


def state_of(c: RawClient, txn: str) -> str | None:
    """The id's state from ListTransactions."""
    listed = c.call(66, 0, request(66, 0, state_filters=(), producer_id_filters=()))
    states = [t.transaction_state for t in listed.transaction_states if t.transactional_id == txn]
    return states[0] if states else None


def still_serving(c: RawClient) -> None:
    assert c.call(18, 3, request(18, 3, client_software_name="t",
                                 client_software_version="1")).error_code == E.none


def wait_state(c: RawClient, txn: str, state: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = describe(c, txn)
        if got.transaction_state == state or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


# ---------------------------------------------------------------------------------- raw wire


def test_init_bumps_the_epoch_and_fences_older_producers(txn_broker: BrokerProcess) -> None:
    with RawClient(txn_broker.bootstrap) as c:
        first = init_pid(c, "raw-fence")
        assert (first.error_code, first.producer_epoch) == (E.none, 0)
        second = init_pid(c, "raw-fence")
        assert (second.error_code, second.producer_id, second.producer_epoch) == (
            E.none, first.producer_id, 1)
        # The first producer resuming with its old epoch is fenced (v3: the pre-KIP-588 code).
        assert init_pid(c, "raw-fence", version=4, pid=first.producer_id,
                        epoch=0).error_code == E.producer_fenced
        assert init_pid(c, "raw-fence", version=3, pid=first.producer_id,
                        epoch=0).error_code == E.invalid_producer_epoch
        assert init_pid(c, "raw-fence", pid=first.producer_id).error_code == E.invalid_request
        still_serving(c)


def test_a_retried_init_whose_answer_was_lost_is_not_fenced(txn_broker: BrokerProcess) -> None:
    """KIP-360 with a transactional id: the producer bumps its epoch naming the one it holds;
    when that answer is lost it sends the same request again and gets the same answer."""
    with RawClient(txn_broker.bootstrap) as c:
        first = init_pid(c, "raw-retry")
        pid = first.producer_id
        bumped = init_pid(c, "raw-retry", pid=pid, epoch=0)
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (E.none, pid, 1)
        again = init_pid(c, "raw-retry", pid=pid, epoch=0)  # the first answer was lost
        assert (again.error_code, again.producer_id, again.producer_epoch) == (E.none, pid, 1)
        assert init_pid(c, "raw-retry", pid=pid, epoch=1).producer_epoch == 2


def test_an_idempotent_producer_only_gets_ids_the_broker_issues(txn_broker: BrokerProcess
                                                                 ) -> None:
    """Without a transactional id, InitProducerId never bumps the producer id the request names
    (it may be another producer's): a fresh id with epoch 0 every time, as Kafka."""
    with RawClient(txn_broker.bootstrap) as c:
        def init(pid: int, epoch: int) -> tuple[int, int]:
            r = c.call(22, 4, request(22, 4, transactional_id=None,
                                      transaction_timeout=timedelta(seconds=60),
                                      producer_id=pid, producer_epoch=epoch))
            assert r.error_code == E.none, r
            return int(r.producer_id), int(r.producer_epoch)

        issued, epoch = init(-1, -1)
        assert epoch == 0
        chosen = init(issued + 10_000, 7)
        assert chosen[1] == 0 and chosen[0] != issued + 10_000
        again = init(issued, 0)
        assert again[1] == 0 and again[0] not in (issued, chosen[0])


def test_timeout_above_the_maximum_is_refused(txn_broker: BrokerProcess) -> None:
    with RawClient(txn_broker.bootstrap) as c:
        assert init_pid(c, "raw-timeout", 120_001).error_code == E.invalid_transaction_timeout
        assert init_pid(c, "raw-timeout", -5).error_code == E.invalid_transaction_timeout
        assert init_pid(c, "", 1000).error_code == E.invalid_request
        assert init_pid(c, "raw-timeout", 120_000).error_code == E.none


def test_endtxn_from_a_fenced_epoch_gets_kafkas_error(txn_broker: BrokerProcess) -> None:
    create_topic(txn_broker.bootstrap, "raw-endtxn", 1)
    with RawClient(txn_broker.bootstrap) as c:
        old = init_pid(c, "raw-endtxn")
        assert add_parts(c, "raw-endtxn", old.producer_id, 0, {"raw-endtxn": [0]}) == {
            ("raw-endtxn", 0): E.none}
        # A new instance aborts the open transaction (the client retries) and fences the old one.
        assert init_pid(c, "raw-endtxn").error_code == E.concurrent_transactions
        assert wait_state(c, "raw-endtxn", "CompleteAbort").transaction_state == "CompleteAbort"
        new = init_pid(c, "raw-endtxn")
        assert (new.error_code, new.producer_epoch) == (E.none, 2)
        for version, error in [(0, E.invalid_producer_epoch), (1, E.invalid_producer_epoch),
                               (2, E.producer_fenced), (4, E.producer_fenced)]:
            assert end_txn(c, "raw-endtxn", old.producer_id, 0, True, version).error_code == error
        assert end_txn(c, "raw-endtxn", old.producer_id + 1000, 2, True).error_code == \
            E.invalid_producer_id_mapping
        assert end_txn(c, "raw-endtxn", new.producer_id, 2, True).error_code == E.invalid_txn_state
        still_serving(c)


def test_add_partitions_for_an_unknown_topic_adds_nothing(txn_broker: BrokerProcess) -> None:
    create_topic(txn_broker.bootstrap, "raw-known", 2)
    with RawClient(txn_broker.bootstrap) as c:
        p = init_pid(c, "raw-unknown")
        assert add_parts(c, "raw-unknown", p.producer_id, 0,
                         {"raw-known": [0, 1], "no-such-topic": [0], "__consumer_offsets": [0]},
                         version=0) == {
            ("raw-known", 0): E.operation_not_attempted, ("raw-known", 1): E.operation_not_attempted,
            ("no-such-topic", 0): E.unknown_topic_or_partition,
            ("__consumer_offsets", 0): E.topic_authorization_failed}
        assert state_of(c, "raw-unknown") == "Empty"
        assert add_parts(c, "raw-unknown", p.producer_id, 0, {"raw-known": [5]}) == {
            ("raw-known", 5): E.unknown_topic_or_partition}
        assert add_parts(c, "unknown-id", 1, 0, {"raw-known": [0]}) == {
            ("raw-known", 0): E.invalid_producer_id_mapping}
        still_serving(c)


def test_write_txn_markers_from_a_client_is_refused(txn_broker: BrokerProcess) -> None:
    create_topic(txn_broker.bootstrap, "raw-markers", 1)
    with RawClient(txn_broker.bootstrap) as c:
        m = c.request_module(27, 1)
        resp = c.call(27, 1, request(27, 1, markers=(m.WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=(m.WritableTxnMarkerTopic(name="raw-markers", partition_indexes=(0,)),)),)))
        errors = [p.error_code for mk in resp.markers for t in mk.topics for p in t.partitions]
        assert errors == [E.cluster_authorization_failed]
        # The v4+ (broker-to-coordinator) AddPartitionsToTxn is refused the same way.
        m24 = c.request_module(24, 4)
        resp24 = c.call(24, 4, request(24, 4, transactions=(m24.AddPartitionsToTxnTransaction(
            transactional_id="x", producer_id=1, producer_epoch=0, verify_only=True,
            topics=(m24.AddPartitionsToTxnTopic(name="raw-markers", partitions=(0,)),)),)))
        assert resp24.error_code == E.cluster_authorization_failed
        still_serving(c)


def test_describe_and_list_transactions(txn_broker: BrokerProcess) -> None:
    create_topic(txn_broker.bootstrap, "raw-describe", 2)
    with RawClient(txn_broker.bootstrap) as c:
        p = init_pid(c, "raw-describe", 45_000)
        add_parts(c, "raw-describe", p.producer_id, 0, {"raw-describe": [1, 0]})
        got = describe(c, "raw-describe")
        assert (got.error_code, got.transaction_state, got.producer_id, got.producer_epoch) == (
            E.none, "Ongoing", p.producer_id, 0)
        assert got.transaction_timeout == timedelta(milliseconds=45_000)
        assert [(t.topic, list(t.partitions)) for t in got.topics] == [("raw-describe", [0, 1])]
        assert describe(c, "never-seen").error_code == E.transactional_id_not_found
        listed = c.call(66, 1, request(66, 1, state_filters=("Ongoing", "Bogus"),
                                       producer_id_filters=(), duration_filter=-1))
        assert listed.error_code == E.none and list(listed.unknown_state_filters) == ["Bogus"]
        assert ("raw-describe", p.producer_id, "Ongoing") in [
            (t.transactional_id, t.producer_id, t.transaction_state)
            for t in listed.transaction_states]
        by_pattern = c.call(66, 2, request(66, 2, state_filters=(), producer_id_filters=(),
                                           duration_filter=-1,
                                           transactional_id_pattern="raw-desc.*"))
        assert [t.transactional_id for t in by_pattern.transaction_states] == ["raw-describe"]

        def list_by(pattern: str) -> Any:
            return c.call(66, 2, request(66, 2, state_filters=(), producer_id_filters=(),
                                         duration_filter=-1, transactional_id_pattern=pattern))

        # A lookahead is no RE2 syntax: refused, the broker keeps serving.
        assert list_by("raw(?=-describe)").error_code == E.invalid_request
        # A pattern that backtracks exponentially in Python's re is matched in linear time.
        long_id = "a" * 40 + "!"
        init_pid(c, long_id, 45_000)
        started = time.monotonic()
        assert list_by("(a+)+$").transaction_states == ()
        assert time.monotonic() - started < 2
        end_txn(c, "raw-describe", p.producer_id, 0, False)


def test_an_open_transaction_is_aborted_at_its_timeout(txn_broker: BrokerProcess) -> None:
    create_topic(txn_broker.bootstrap, "raw-timeout-abort", 1)
    with RawClient(txn_broker.bootstrap) as c:
        p = init_pid(c, "raw-timeout-abort", 500)
        add_parts(c, "raw-timeout-abort", p.producer_id, 0, {"raw-timeout-abort": [0]})
        got = wait_state(c, "raw-timeout-abort", "CompleteAbort", timeout=5)
        assert (got.transaction_state, got.producer_epoch) == ("CompleteAbort", 1)
        assert end_txn(c, "raw-timeout-abort", p.producer_id, 0, True).error_code == \
            E.producer_fenced


# ------------------------------------------------------------------ confluent-kafka end to end


def txn_producer(bootstrap: str, txn: str, **conf: Any) -> Any:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn,
                  "transaction.timeout.ms": 30_000, **conf})
    p.init_transactions(T)
    return p


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str,
                expect: int | None = None, timeout: float = 8.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a fresh consumer reads from the start."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{isolation}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    if len(eof) == partitions and (expect is None or len(got) >= expect):
                        break
                continue
            got.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        c.close()
    return sorted(got)


def last_stable_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    with RawClient(bootstrap) as c:
        m = c.request_module(1, 12)
        resp = c.call(1, 12, request(1, 12, replica_id=-1, max_wait=timedelta(0), min_bytes=0,
                                     max_bytes=1 << 16, isolation_level=1, session_id=0,
                                     session_epoch=-1, topics=(m.FetchTopic(topic=topic, partitions=(
                                         m.FetchPartition(partition=partition,
                                                          current_leader_epoch=-1, fetch_offset=0,
                                                          last_fetched_epoch=-1, log_start_offset=-1,
                                                          partition_max_bytes=1 << 16),)),),
                                     forgotten_topics_data=(), rack_id=""))
        return int(resp.responses[0].partitions[0].last_stable_offset)


def test_commit_and_abort_as_read_committed_and_read_uncommitted_see_them(
        txn_broker: BrokerProcess) -> None:
    topic = "e2e-commit-abort"
    create_topic(txn_broker.bootstrap, topic, 2)
    p = txn_producer(txn_broker.bootstrap, "e2e-1")
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, f"committed-{i}".encode(), partition=i % 2)
    p.commit_transaction(T)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, f"aborted-{i}".encode(), partition=i % 2)
    p.flush(T)  # in the log before the abort (abort_transaction purges what is unsent)
    p.abort_transaction(T)
    p.begin_transaction()
    p.produce(topic, b"committed-last", partition=0)
    p.commit_transaction(T)
    committed = consume_all(txn_broker.bootstrap, topic, 2, "read_committed", 7)
    values = sorted(v for _, _, v in committed)
    assert values == sorted([f"committed-{i}".encode() for i in range(6)] + [b"committed-last"])
    uncommitted = consume_all(txn_broker.bootstrap, topic, 2, "read_uncommitted", 11)
    assert sorted(v for _, _, v in uncommitted) == sorted(
        values + [f"aborted-{i}".encode() for i in range(4)])
    # Control records (one marker per transaction and partition) take offsets nobody sees.
    offsets_p0 = [o for part, o, _ in uncommitted if part == 0]
    assert offsets_p0 == [0, 1, 2, 4, 5, 7]  # 3 = COMMIT marker, 6 = ABORT marker
    with RawClient(txn_broker.bootstrap) as c:
        assert describe(c, "e2e-1").transaction_state == "CompleteCommit"


_ZOMBIE = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
              "transaction.timeout.ms": 2000})
p.init_transactions(10)
p.begin_transaction()
for i in range(3):
    p.produce(sys.argv[3], f"open-{i}".encode(), partition=0)
p.flush(10)
print("produced", flush=True)
time.sleep(600)
"""


def test_a_killed_producers_transaction_aborts_at_its_timeout_and_the_lso_advances(
        txn_broker: BrokerProcess) -> None:
    import signal
    import subprocess
    import sys

    topic = "e2e-zombie"
    create_topic(txn_broker.bootstrap, topic, 1)
    proc = subprocess.Popen([sys.executable, "-c", _ZOMBIE, txn_broker.bootstrap, "e2e-zombie",
                             topic], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"produced"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
    assert last_stable_offset(txn_broker.bootstrap, topic) == 0  # held by the open transaction
    with RawClient(txn_broker.bootstrap) as c:
        assert describe(c, "e2e-zombie").transaction_state == "Ongoing"
        got = wait_state(c, "e2e-zombie", "CompleteAbort", timeout=10)
        assert (got.transaction_state, got.producer_epoch) == ("CompleteAbort", 1)
    assert last_stable_offset(txn_broker.bootstrap, topic) == 4  # 3 records + the ABORT marker
    assert consume_all(txn_broker.bootstrap, topic, 1, "read_committed") == []


def test_a_second_producer_with_the_same_id_fences_the_first(txn_broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException

    topic = "e2e-fence"
    create_topic(txn_broker.bootstrap, topic, 1)
    first = txn_producer(txn_broker.bootstrap, "e2e-fence")
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(T)
    second = txn_producer(txn_broker.bootstrap, "e2e-fence")  # aborts the open transaction
    second.begin_transaction()
    second.produce(topic, b"winner", partition=0)
    second.commit_transaction(T)
    with pytest.raises(KafkaException) as err:
        first.commit_transaction(T)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    assert [v for _, _, v in consume_all(txn_broker.bootstrap, topic, 1, "read_committed", 1)] \
        == [b"winner"]


def test_a_restart_completes_the_markers_of_a_durable_prepare_commit(tmp_path: Path) -> None:
    """The crash window between PrepareCommit (durable) and the markers: a transaction is left
    open, the broker is SIGKILLed, and its ``__transaction_state`` log is given the PrepareCommit
    record the coordinator would have written (nothing else: no marker). The restarted broker
    finds it, writes the COMMIT marker and completes the transaction."""
    from coordinator.txn.service import TRANSACTION_STATE_TOPIC
    from coordinator.group.placement import partition_for_group
    from coordinator.runtime.records import encode_batch
    from coordinator.txn.metadata import TxnState
    from coordinator.txn.records import TxnRecordSerde, new_txn_record
    from storage.segment_log import LogConfig, PartitionLog

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    topic, txn = "e2e-restart", "e2e-restart"
    try:
        create_topic(broker.bootstrap, topic, 1)
        p = txn_producer(broker.bootstrap, txn)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, f"kept-{i}".encode(), partition=0)
        p.flush(T)
        broker.kill()
        p = None
        part = partition_for_group(txn, 50)
        lg = PartitionLog.open(tmp_path / "data" / f"{TRANSACTION_STATE_TOPIC}-{part}",
                               LogConfig(), int(time.time() * 1000))
        try:
            serde = TxnRecordSerde()
            from coordinator.runtime.records import decode_batches

            last = None
            for _, key, value in decode_batches(lg.read(lg.log_start_offset, 1 << 20).data):
                decoded = serde.decode(key, value)
                if decoded is not None and decoded[0] == txn:
                    last = decoded[1]
            assert last is not None and last.state is TxnState.ONGOING
            prepared = last.moved_to(TxnState.PREPARE_COMMIT)
            now = int(time.time() * 1000)
            lg.append(encode_batch([serde.encode(new_txn_record(prepared))], now), now)
            lg.flush()
        finally:
            lg.close()
        broker.start()
        with RawClient(broker.bootstrap) as c:
            got = wait_state(c, txn, "CompleteCommit", timeout=10)
            assert got.transaction_state == "CompleteCommit"
        assert [v for _, _, v in consume_all(broker.bootstrap, topic, 1, "read_committed", 3)] \
            == [b"kept-0", b"kept-1", b"kept-2"]
        assert last_stable_offset(broker.bootstrap, topic) == 4
    finally:
        broker.stop()


async def test_aiokafka_transactional_producer_commits_and_aborts(
        txn_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = "e2e-aiokafka"
    create_topic(txn_broker.bootstrap, topic, 1)
    p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="e2e-aio")
    await p.start()
    try:
        async with p.transaction():
            await p.send_and_wait(topic, b"aio-committed", partition=0)
            # AddOffsetsToTxn v0 + TxnOffsetCommit v0: committed with the transaction.
            await p.send_offsets_to_transaction({AioTopicPartition(topic, 0): 1}, "e2e-aio-group")
        with pytest.raises(RuntimeError):
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-aborted", partition=0)
                raise RuntimeError("abort this one")
    finally:
        await p.stop()
    with RawClient(txn_broker.bootstrap) as c:
        assert wait_state(c, "e2e-aio", "CompleteAbort").transaction_state == "CompleteAbort"
    # COMMIT marker at 1, ABORT marker at 3: both transactions reached the log and ended there.
    uncommitted = consume_all(txn_broker.bootstrap, topic, 1, "read_uncommitted", 2)
    assert [(o, v) for _, o, v in uncommitted] == [(0, b"aio-committed"), (2, b"aio-aborted")]
    c = AIOKafkaConsumer(bootstrap_servers=txn_broker.bootstrap, group_id="e2e-aio-group",
                         enable_auto_commit=False)
    await c.start()
    try:
        assert await c.committed(AioTopicPartition(topic, 0)) == 1
    finally:
        await c.stop()


def test_offsets_sent_to_a_transaction_commit_with_it_and_not_on_abort(
        txn_broker: BrokerProcess) -> None:
    """Consume-transform-produce: AddOffsetsToTxn + TxnOffsetCommit inside the transaction; the
    group's committed offset moves only when the transaction commits (the coordinator's marker on
    ``__consumer_offsets``)."""
    from confluent_kafka import Consumer, TopicPartition

    src, group = "e2e-offsets-src", "e2e-offsets-group"
    create_topic(txn_broker.bootstrap, src, 1)
    c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "group.protocol": "classic",
                  "session.timeout.ms": 6000})
    try:
        c.assign([TopicPartition(src, 0, 0)])
        p = txn_producer(txn_broker.bootstrap, "e2e-offsets")

        def committed() -> int:
            return int(c.committed([TopicPartition(src, 0)], timeout=T)[0].offset)

        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(src, 0, 5)], c.consumer_group_metadata(), T)
        p.abort_transaction(T)
        assert committed() < 0  # nothing committed
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(src, 0, 7)], c.consumer_group_metadata(), T)
        p.commit_transaction(T)
        deadline = time.monotonic() + 10
        while committed() != 7:
            assert time.monotonic() < deadline, "the transactional offset never became committed"
            time.sleep(0.1)
    finally:
        c.close()


def test_idle_transactional_ids_expire_and_super_users_may_write_markers(tmp_path: Path) -> None:
    """``transactional.id.expiration.ms`` removes an idle id; WriteTxnMarkers from a principal
    with CLUSTER_ACTION (``super.users``) is served per partition, as ``kafka-transactions.sh
    abort`` uses it: an ABORT marker ends a hanging transaction and the LSO moves past it."""
    import urllib.request

    from tests.conftest import free_port

    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", {
        "transactional.id.expiration.ms": "300",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
        "super.users": "User:ANONYMOUS", "metrics.listen": f"127.0.0.1:{metrics_port}"})
    broker.start()
    try:
        topic = "e2e-hanging"
        create_topic(broker.bootstrap, topic, 1)
        with RawClient(broker.bootstrap) as c:
            assert init_pid(c, "e2e-idle").error_code == E.none
            deadline = time.monotonic() + 10
            while state_of(c, "e2e-idle") is not None:
                assert time.monotonic() < deadline, "the idle id was never removed"
                time.sleep(0.05)
        p = txn_producer(broker.bootstrap, "e2e-hanging")
        p.begin_transaction()
        p.produce(topic, b"hanging", partition=0)
        p.flush(T)
        assert last_stable_offset(broker.bootstrap, topic) == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            page = r.read().decode()
        assert 'shoal_transactions{state="Ongoing"} 1' in page
        assert "shoal_transaction_markers_pending 0" in page
        with RawClient(broker.bootstrap) as c:
            got = describe(c, "e2e-hanging")
            m = c.request_module(27, 1)
            resp = c.call(27, 1, request(27, 1, markers=(m.WritableTxnMarker(
                producer_id=got.producer_id, producer_epoch=got.producer_epoch,
                transaction_result=False, coordinator_epoch=0,
                topics=(m.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),
                        m.WritableTxnMarkerTopic(name="no-such-topic",
                                                 partition_indexes=(0,)))),)))
            assert [(t.name, p.error_code) for mk in resp.markers for t in mk.topics
                    for p in t.partitions] == [(topic, E.none),
                                               ("no-such-topic", E.unknown_topic_or_partition)]
        assert last_stable_offset(broker.bootstrap, topic) == 2
        assert consume_all(broker.bootstrap, topic, 1, "read_committed") == []
    finally:
        broker.stop()
