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
    """The id's state from ListTransactions (DescribeTransactions of an id that never started a
    transaction carries start time -1, which kio cannot decode)."""
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
