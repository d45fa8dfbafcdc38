"""No single request may stall everyone else (issue 12, section 1), over real sockets.

A huge ShareFetch or Fetch is answered (or refused) while another client keeps getting answers
quickly; partitions of unknown topics never enter a share session; a session's partitions are
capped; ``socket.request.max.bytes`` is enforced from the size prefix.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from protocol import codec
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, closed_by_peer, recv_exact
from tests.integration.share.test_protocol import Member, topic_id

CAP = 20
MAX_FRAME = 16 * 1024 * 1024


@pytest.fixture(scope="module")
def wb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("wire-limits")) / "data",
                      overrides={"group.share.max.session.partitions": str(CAP),
                                 "socket.request.max.bytes": str(MAX_FRAME)})
    b.start()
    yield b
    b.stop()


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _widen(frame: bytes, one: bytes, count: int) -> bytes:
    """Turn a frame holding one array element ``one`` (after its compact count 2) into one
    holding ``count`` copies; returns the new size-prefixed frame."""
    at = frame.index(b"\x02" + one)
    body = frame[4:at] + _uvarint(count + 1) + one * count + frame[at + 1 + len(one):]
    return struct.pack(">i", len(body)) + body


def wide_share_fetch(count: int, group: str = "g", member: str = "wide") -> bytes:
    """A ShareFetch v1 (epoch 0) listing partition 7 of an unknown topic ``count`` times."""
    m = codec.request_module(78, 1)
    body = m.ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=0, max_wait=timedelta(0),
        min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=(),
        topics=(m.FetchTopic(topic_id=uuid.uuid4(), partitions=(
            m.FetchPartition(partition_index=7, acknowledgement_batches=()),)),))
    one = struct.pack(">i", 7) + b"\x01\x00"  # index, empty compact array, no tagged fields
    return _widen(codec.encode_request(78, 1, 1, "wide", body), one, count)


def wide_fetch(count: int) -> bytes:
    """A Fetch v17 listing ``count`` partitions of an unknown topic id."""
    m = codec.request_module(1, 17)
    fp = m.FetchPartition(partition=3, current_leader_epoch=-1, fetch_offset=0,
                          last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1024)
    body = m.FetchRequest(max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
                          isolation_level=0, session_id=0, session_epoch=-1,
                          forgotten_topics_data=(), rack_id="",
                          topics=(m.FetchTopic(topic_id=uuid.uuid4(), partitions=(fp,)),))
    one = struct.pack(">iiqiqi", 3, -1, 0, -1, -1, 1024) + b"\x00"
    return _widen(codec.encode_request(1, 17, 1, "wide", body), one, count)


class Pinger(threading.Thread):
    """Round trips of ApiVersions on its own connection; records the slowest."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.client = RawClient(bootstrap, client_id="control")
        self.client.call(18, 3, self._req())  # connected and warm before measuring
        self.stop = threading.Event()
        self.worst = 0.0
        self.count = 0

    @staticmethod
    def _req() -> Any:
        m = codec.request_module(18, 3)
        return m.ApiVersionsRequest(client_software_name="c", client_software_version="1")

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.client.call(18, 3, self._req())
            self.worst = max(self.worst, time.monotonic() - t0)
            self.count += 1
            time.sleep(0.005)

    def finish(self) -> float:
        self.stop.set()
        self.join(30)
        self.client.close()
        return self.worst


def _send_and_read(bootstrap: str, frame: bytes, api_key: int, version: int) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(frame)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        return codec.decode_response(api_key, version, recv_exact(s, size))[1]



def _while_pinging(bootstrap: str, work: Callable[[], Any]) -> tuple[Any, float]:
    pinger = Pinger(bootstrap)
    pinger.start()
    try:
        result = work()
    finally:
        worst = pinger.finish()
    assert pinger.count > 0
    return result, worst


def test_two_million_partition_share_fetch_is_refused_without_stalling_others(wb) -> None:
    """12 MB of ShareFetch: refused from the partition count before kio builds 2M objects, and
    walked in a worker thread (the old path decoded it on the loop for ~3.5 s)."""
    frame = wide_share_fetch(2_000_000)
    assert len(frame) > 12_000_000
    resp, worst = _while_pinging(wb.bootstrap, lambda: _send_and_read(wb.bootstrap, frame, 78, 1))
    assert resp.error_code == ErrorCode.share_session_limit_reached
    assert "2000000 partitions" in resp.error_message
    assert resp.responses == ()
    assert worst < 1.0, f"a control round trip took {worst:.3f}s during the wide ShareFetch"


def test_hundred_thousand_partition_fetch_is_answered_without_stalling_others(wb) -> None:
    frame = wide_fetch(100_000)
    resp, worst = _while_pinging(wb.bootstrap, lambda: _send_and_read(wb.bootstrap, frame, 1, 17))
    (t,) = resp.responses
    assert len(t.partitions) == 100_000
    assert {p.error_code for p in t.partitions} == {ErrorCode.unknown_topic_id}
    assert worst < 0.6, f"a control round trip took {worst:.3f}s during the wide Fetch"


@pytest.fixture
def topic(wb, unique: str) -> tuple[str, uuid.UUID]:
    create_topic(wb.bootstrap, unique, 30)
    with RawClient(wb.bootstrap) as c:
        return unique, topic_id(c, unique)


def _fetch_raw(member: Member, topics: dict[uuid.UUID, tuple[int, ...]], epoch: int) -> Any:
    m = codec.request_module(78, 2)
    body = m.ShareFetchRequest(
        group_id=member.group, member_id=member.member_id, share_session_epoch=epoch,
        max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
        is_renew_ack=False, forgotten_topics_data=(),
        topics=tuple(m.FetchTopic(topic_id=t, partitions=tuple(
            m.FetchPartition(partition_index=p, acknowledgement_batches=()) for p in ps))
            for t, ps in topics.items()))
    return member.c.call(78, 2, body)


def _errors(resp: Any) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    return {(t.topic_id, p.partition_index): p.error_code
            for t in resp.responses for p in t.partitions}


def test_partitions_of_unknown_topics_never_enter_the_session(wb, topic) -> None:
    name, tid = topic
    ghost = uuid.uuid4()
    a = Member(wb.bootstrap, name, "a", tid)
    try:
        first = _fetch_raw(a, {tid: (0, 99), ghost: (0, 1, 2)}, epoch=0)
        assert first.error_code == ErrorCode.none
        errors = _errors(first)
        assert errors[(ghost, 0)] == errors[(ghost, 2)] == ErrorCode.unknown_topic_id
        assert errors[(tid, 99)] == ErrorCode.unknown_topic_or_partition
        # The next poll covers the session only: the unknown partitions are not in it, so they
        # are neither answered again nor walked.
        again = _fetch_raw(a, {}, epoch=1)
        assert again.error_code == ErrorCode.none
        unknown = {ErrorCode.unknown_topic_id, ErrorCode.unknown_topic_or_partition}
        assert not {k for k, e in _errors(again).items() if e in unknown}
    finally:
        a.close()


def test_a_session_holds_at_most_the_configured_partitions(wb, topic) -> None:
    name, tid = topic
    a = Member(wb.bootstrap, name, "a", tid)
    try:
        over = _fetch_raw(a, {tid: tuple(range(CAP + 1))}, epoch=0)
        assert over.error_code == ErrorCode.share_session_limit_reached
        assert "group.share.max.session.partitions" in over.error_message
        assert _fetch_raw(a, {tid: tuple(range(CAP - 2))}, epoch=0).error_code == ErrorCode.none
        # Adding three more would make CAP + 1: refused, and the session is left as it was.
        grow = _fetch_raw(a, {tid: (CAP - 2, CAP - 1, CAP)}, epoch=1)
        assert grow.error_code == ErrorCode.share_session_limit_reached
        assert _fetch_raw(a, {tid: (CAP - 2, CAP - 1)}, epoch=1).error_code == ErrorCode.none
        assert _fetch_raw(a, {}, epoch=2).error_code == ErrorCode.none
        # Partitions of unknown topics and duplicates take no room in the session (a request
        # may still list at most CAP partitions in all).
        fresh = _fetch_raw(a, {tid: tuple(range(CAP - 5)), uuid.uuid4(): tuple(range(5))},
                           epoch=0)
        assert fresh.error_code == ErrorCode.none
        more = _fetch_raw(a, {tid: (0, 1, 2) + tuple(range(CAP - 5, CAP))}, epoch=1)
        assert more.error_code == ErrorCode.none
    finally:
        a.close()


def test_share_acknowledge_over_the_cap_is_refused_before_decoding(wb, topic) -> None:
    name, tid = topic
    a = Member(wb.bootstrap, name, "a", tid)
    try:
        m = codec.request_module(79, 2)
        body = m.ShareAcknowledgeRequest(
            group_id=name, member_id="a", share_session_epoch=1, is_renew_ack=False,
            topics=(m.AcknowledgeTopic(topic_id=tid, partitions=tuple(
                m.AcknowledgePartition(partition_index=p, acknowledgement_batches=(
                    m.AcknowledgementBatch(first_offset=0, last_offset=0,
                                           acknowledge_types=(1,)),))
                for p in range(CAP + 1))),))
        resp = a.c.call(79, 2, body)
        assert resp.error_code == ErrorCode.invalid_request
        assert f"{CAP + 1} partitions" in resp.error_message
    finally:
        a.close()


def test_socket_request_max_bytes_is_enforced_from_the_size_prefix(wb) -> None:
    host, port = wb.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack(">i", MAX_FRAME + 1))  # the prefix alone, no payload at all
        assert closed_by_peer(s, timeout=5)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack(">i", MAX_FRAME) + b"\x00" * 1000)  # at the cap: still waiting
        assert not closed_by_peer(s, timeout=0.5)
