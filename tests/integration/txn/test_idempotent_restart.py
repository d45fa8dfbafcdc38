"""An idempotent producer's retry after a broker restart is answered with the original offsets and
not appended again (issue 12, section 7), after SIGKILL and after a clean shutdown.

A raw client does what a real producer does when its request times out around a restart: it sends
the very same batch (producer id, epoch, base sequence) again.
"""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.produce_helpers import init_producer_id, log_end_offset, produce
from tests.integration.rawclient import RawClient
from tests.unit.batches import make_batch


def _batch(pid: int, epoch: int, seq: int, n: int, tag: str) -> bytes:
    return make_batch([(None, f"{tag}-{seq + i}".encode() * 20) for i in range(n)],
                      timestamp_ms=int(time.time() * 1000), producer_id=pid,
                      producer_epoch=epoch, base_sequence=seq)


@pytest.mark.parametrize("restart", ["sigkill", "clean"])
@pytest.mark.parametrize("segment_bytes", ["1073741824", "2048"], ids=["one-segment", "rolling"])
def test_retried_batch_after_restart_is_not_appended_twice(fresh_broker: BrokerProcess, unique,
                                                           restart: str,
                                                           segment_bytes: str) -> None:
    b = fresh_broker
    b.overrides["log.segment.bytes"] = segment_bytes
    b.start()
    create_topic(b.bootstrap, unique, 1)
    sent: list[tuple[bytes, int]] = []
    with RawClient(b.bootstrap) as c:
        pid, epoch = init_producer_id(c)
        seq = 0
        for _ in range(12):
            data = _batch(pid, epoch, seq, 3, unique)
            got = produce(c, unique, data)
            assert got.error_code == ErrorCode.none, got
            sent.append((data, got.base_offset))
            seq += 3
        leo = log_end_offset(c, unique)
    assert leo == 36
    if restart == "sigkill":
        b.kill()
    else:
        assert b.stop() == 0
    b.start()
    with RawClient(b.bootstrap) as c:
        # Kafka answers a duplicate of one of the producer's last five batches with its offset.
        for data, base in sent[-5:]:
            got = produce(c, unique, data)
            assert (got.error_code, got.base_offset) == (ErrorCode.none, base), got
        assert log_end_offset(c, unique) == leo
        # An older batch is out of sequence rather than appended again.
        older = produce(c, unique, sent[0][0])
        assert older.error_code == ErrorCode.out_of_order_sequence_number
        # The producer carries on where it was.
        nxt = produce(c, unique, _batch(pid, epoch, seq, 3, unique))
        assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, leo)
        assert log_end_offset(c, unique) == leo + 3
    if segment_bytes == "2048":
        snapshots = sorted(p.name for p in (b.data_dir / f"{unique}-0").glob("*.snapshot"))
        assert snapshots, "rolled segments leave producer-state snapshots"


def test_a_producer_whose_state_expired_carries_on_at_its_sequence(fresh_broker: BrokerProcess,
                                                                  unique) -> None:
    """KIP-360: once ``producer.id.expiration.ms`` has removed an idle producer's state, its next
    batch (at the sequence it was at) is appended, not answered UNKNOWN_PRODUCER_ID."""
    b = fresh_broker
    b.overrides.update({"producer.id.expiration.ms": "300",
                        "producer.id.expiration.check.interval.ms": "100"})
    b.start()
    create_topic(b.bootstrap, unique, 1)
    with RawClient(b.bootstrap) as c:
        pid, epoch = init_producer_id(c)
        assert produce(c, unique, _batch(pid, epoch, 0, 3, unique)).error_code == ErrorCode.none
        time.sleep(1.0)  # idle past the expiration, and a sweep or more
        got = produce(c, unique, _batch(pid, epoch, 3, 3, unique))
        assert (got.error_code, got.base_offset) == (ErrorCode.none, 3), got
        retried = produce(c, unique, _batch(pid, epoch, 3, 3, unique))
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 3)  # a duplicate
        assert log_end_offset(c, unique) == 6
