"""Connections and sessions are bounded (issue 12, section 4), over real sockets.

Connection quotas at accept, idle and partial-frame expiry, back-pressure against a client that
never reads its responses, share sessions that go with their members, and the capacity a broker
must hold at once (3,000 connections, 2,000 share sessions, 200 members of one group).
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from protocol import codec
from tests.conftest import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import RawClient, closed_by_peer, recv_exact, request
from tests.integration.share_helpers import produce
from tests.integration.share.test_protocol import Member, heartbeat, topic_id


def _started(tmp: Path, overrides: dict[str, str]) -> BrokerProcess:
    b = BrokerProcess(tmp / "data", overrides=overrides)
    b.start()
    return b


def _api_versions_frame(correlation_id: int = 1) -> bytes:
    m = codec.request_module(18, 3)
    return codec.encode_request(18, 3, correlation_id, "t", m.ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))


def _connect(bootstrap: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))


def _served(s: socket.socket) -> bool:
    """Whether an ApiVersions on ``s`` is answered (False if the broker closed ``s``)."""
    try:
        s.sendall(_api_versions_frame())
        head = s.recv(4)
    except (ConnectionError, TimeoutError):
        return False
    if len(head) < 4:
        return False
    size = struct.unpack(">i", head)[0]
    got = 0
    while got < size:
        chunk = s.recv(size - got)
        if not chunk:
            return False
        got += len(chunk)
    return True


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# -- quotas at accept ---------------------------------------------------------------------------


def test_connection_quotas_close_the_excess_at_accept(tmp_path: Path) -> None:
    b = _started(tmp_path, {"max.connections": "8", "max.connections.per.ip": "2",
                            "max.connections.per.ip.overrides": "127.0.0.1:5"})
    held: list[socket.socket] = []
    try:
        for _ in range(5):  # 127.0.0.1 has an override of 5
            held.append(_connect(b.bootstrap))
            assert _served(held[-1])
        extra = _connect(b.bootstrap)
        assert closed_by_peer(extra, timeout=5), "a 6th connection from 127.0.0.1 was kept"
        extra.close()
        for _ in range(2):  # any other address gets max.connections.per.ip
            held.append(_connect(b.bootstrap, "127.0.0.2"))
            assert _served(held[-1])
        extra = _connect(b.bootstrap, "127.0.0.2")
        assert closed_by_peer(extra, timeout=5), "a 3rd connection from 127.0.0.2 was kept"
        extra.close()
        held.append(_connect(b.bootstrap, "127.0.0.3"))  # the 8th: max.connections reached
        assert _served(held[-1])
        extra = _connect(b.bootstrap, "127.0.0.4")
        assert closed_by_peer(extra, timeout=5), "a 9th connection was kept"
        extra.close()
        # Closing one frees its slot.
        held.pop(0).close()
        deadline = time.monotonic() + 5
        while True:
            s = _connect(b.bootstrap)
            if _served(s):
                held.append(s)
                break
            s.close()
            assert time.monotonic() < deadline, "the freed slot was never reused"
            time.sleep(0.05)
        assert "max.connections.per.ip=5" in b.logs() or "max.connections" in b.logs()
    finally:
        for s in held:
            s.close()
        b.stop()


# -- idle and partial frames --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _started(Path(tmp_path_factory.mktemp("conn-timeouts")),
                 {"connections.max.idle.ms": "1500", "socket.request.partial.timeout.ms": "800"})
    yield b
    b.stop()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(tb) -> None:
    idle, busy = _connect(tb.bootstrap), _connect(tb.bootstrap)
    try:
        assert _served(idle) and _served(busy)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            assert _served(busy), "a connection in use was closed"
            time.sleep(0.2)
        assert closed_by_peer(idle, timeout=1.0), "an idle connection outlived the idle limit"
        assert "connections.max.idle.ms" in tb.logs()
    finally:
        idle.close()
        busy.close()


def test_a_partial_frame_is_bounded_in_time_even_when_trickled(tb) -> None:
    s = _connect(tb.bootstrap)
    try:
        s.sendall(struct.pack(">i", 1000) + b"\x00" * 10)
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 4.0 and not closed:
            try:
                s.sendall(b"\x00")  # a byte every 100 ms keeps it from ever being idle
            except OSError:
                closed = True
                break
            closed = closed_by_peer(s, timeout=0.1)
        assert closed, "a trickled partial frame was never cut off"
        assert time.monotonic() - t0 < 3.0
        assert "socket.request.partial.timeout.ms" in tb.logs()
    finally:
        s.close()


# -- back-pressure ------------------------------------------------------------------------------


def test_a_client_that_never_reads_does_not_make_the_broker_buffer(tmp_path: Path,
                                                                    unique: str) -> None:
    """300 pipelined 1 MiB fetches, never read. Before, every one was answered into memory
    (~300 MB); now reading stops once queued.max.response.bytes (16 MiB) are unsent."""
    b = _started(tmp_path, {})
    slow = None
    try:
        create_topic(b.bootstrap, unique, 1)
        produce(b.bootstrap, unique, 1200, prefix="x" * 1000)
        with RawClient(b.bootstrap) as c:
            tid = topic_id(c, unique)
        m = codec.request_module(1, 13)
        fetch = request(1, 13, replica_id=-1, max_wait=timedelta(0), min_bytes=1,
                        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                        forgotten_topics_data=(), rack_id="",
                        topics=(m.FetchTopic(topic_id=tid, partitions=(m.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0,
                            last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=1 << 20),)),))
        frames = b"".join(codec.encode_request(1, 13, i, "slow", fetch) for i in range(300))
        before = _rss_bytes(b.proc.pid)
        slow = _connect(b.bootstrap)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        slow.sendall(frames)
        peak = 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            peak = max(peak, _rss_bytes(b.proc.pid) - before)
            with RawClient(b.bootstrap, timeout=2) as other:  # others are served meanwhile
                assert other.call(18, 3, request(18, 3, client_software_name="t",
                                                 client_software_version="1")
                                  ).error_code == ErrorCode.none
            time.sleep(0.1)
        assert peak < 100 * 1024 * 1024, f"broker RSS grew by {peak / 2**20:.0f} MiB"
        # Once the client reads, every answer arrives, in order.
        slow.settimeout(30)
        for i in range(300):
            size = struct.unpack(">i", recv_exact(slow, 4))[0]
            assert struct.unpack(">i", recv_exact(slow, size)[:4])[0] == i
    finally:
        if slow is not None:
            slow.close()
        b.stop()



def test_half_sent_frames_hold_at_most_the_request_memory_budget(tmp_path: Path) -> None:
    """40 clients each send half of an 8 MB frame and stall. Before, the broker buffered all
    of it (~160 MB); now frames wait for queued.max.request.bytes (16 MiB) before being read."""
    b = _started(tmp_path, {"queued.max.request.bytes": str(16 * 1024 * 1024)})
    conns: list[tuple[socket.socket, int]] = []
    try:
        valid = _api_versions_frame(9)
        size = 8_000_000
        frame = struct.pack(">i", size) + valid[4:] + b"\x00" * (size + 4 - len(valid))
        half = size // 2
        before = _rss_bytes(b.proc.pid)
        for _ in range(40):
            s = _connect(b.bootstrap)
            s.setblocking(False)
            sent = 0
            deadline = time.monotonic() + 1
            while sent < half and time.monotonic() < deadline:
                try:
                    sent += s.send(frame[sent:half])
                except BlockingIOError:
                    time.sleep(0.01)  # not read any more: the broker waits for memory
            conns.append((s, sent))
        time.sleep(0.5)
        grown = _rss_bytes(b.proc.pid) - before
        assert grown < 64 * 1024 * 1024, f"broker RSS grew by {grown / 2**20:.0f} MiB"
        with RawClient(b.bootstrap, timeout=5) as other:  # small requests need no budget
            assert other.call(18, 3, request(18, 3, client_software_name="t",
                                             client_software_version="1")
                              ).error_code == ErrorCode.none
        # When the others go away, the last one gets its memory and its request is answered.
        last, sent = conns.pop()
        for s, _ in conns:
            s.close()
        conns = [(last, sent)]
        last.setblocking(True)
        last.settimeout(20)
        last.sendall(frame[sent:])
        size_prefix = struct.unpack(">i", recv_exact(last, 4))[0]
        assert struct.unpack(">i", recv_exact(last, size_prefix)[:4])[0] == 9
    finally:
        for s, _ in conns:
            s.close()
        b.stop()


# -- share sessions go with their members -------------------------------------------------------


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _started(Path(tmp_path_factory.mktemp("session-eviction")), {
        "group.share.max.share.sessions": "2", "group.share.max.size": "2",
        "group.share.min.session.timeout.ms": "1000", "group.share.session.timeout.ms": "1500",
        "group.share.min.heartbeat.interval.ms": "500",
        "group.share.heartbeat.interval.ms": "500"})
    yield b
    b.stop()


@pytest.fixture
def shared_topic(sb, unique: str) -> tuple[str, uuid.UUID]:
    create_topic(sb.bootstrap, unique, 1)
    with RawClient(sb.bootstrap) as c:
        return unique, topic_id(c, unique)


def _join(member: Member) -> None:
    resp = heartbeat(member.c, member.group, member.member_id, 0, (member.group,))
    assert resp.error_code == ErrorCode.none, resp


def _session_gone(member: Member, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = member.fetch(max_wait_ms=0, epoch=member.epoch, advance=False)
        if resp.error_code == ErrorCode.share_session_not_found:
            return True
        assert resp.error_code == ErrorCode.none, resp
        member.epoch += 1
        time.sleep(0.1)
    return False


def test_the_session_of_a_member_that_leaves_is_closed(sb, shared_topic) -> None:
    a = Member(sb.bootstrap, shared_topic[0], "leaver", shared_topic[1])
    try:
        _join(a)
        assert a.fetch(max_wait_ms=0).error_code == ErrorCode.none
        assert heartbeat(a.c, a.group, "leaver", -1, None).error_code == ErrorCode.none
        assert _session_gone(a, timeout=3)
    finally:
        a.close()


def test_the_session_of_a_fenced_member_is_closed(sb, shared_topic) -> None:
    a = Member(sb.bootstrap, shared_topic[0], "sleeper", shared_topic[1])
    try:
        _join(a)
        assert a.fetch(max_wait_ms=0).error_code == ErrorCode.none
        # No more heartbeats: the member expires after 1.5 s and its session goes with it.
        assert _session_gone(a, timeout=8)
        assert "sleeper" in sb.logs()
    finally:
        a.close()


def test_a_live_member_takes_the_slot_of_a_departed_one_when_sessions_are_full(
        sb, shared_topic) -> None:
    name, tid = shared_topic
    squatters = [Member(sb.bootstrap, name, f"ghost-{i}", tid) for i in range(3)]
    live = Member(sb.bootstrap, name, "live", tid)
    try:
        for s in squatters[:2]:  # never joined the group: they fill the cache (2 sessions)
            assert s.fetch(max_wait_ms=0).error_code == ErrorCode.none
        # Someone who is not a member cannot push anyone out.
        assert squatters[2].fetch(max_wait_ms=0).error_code == \
            ErrorCode.share_session_limit_reached
        _join(live)
        assert live.fetch(max_wait_ms=0).error_code == ErrorCode.none
        gone = sum(s.fetch(max_wait_ms=0, advance=False).error_code ==
                   ErrorCode.share_session_not_found for s in squatters[:2])
        assert gone == 1
        assert heartbeat(live.c, name, "live", -1, None).error_code == ErrorCode.none
    finally:
        for s in [*squatters, live]:
            s.close()


# -- capacity -----------------------------------------------------------------------------------


def _call_all(socks: list[socket.socket], frames: list[bytes], api_key: int, version: int
              ) -> list[Any]:
    """Send one request on each socket, then read every answer."""
    for s, f in zip(socks, frames):
        s.sendall(f)
    out = []
    for s in socks:
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        out.append(codec.decode_response(api_key, version, recv_exact(s, size))[1])
    return out


def test_holds_3000_connections_2000_share_sessions_and_200_members(tmp_path: Path,
                                                                    unique: str) -> None:
    b = _started(tmp_path, {})
    socks: list[socket.socket] = []
    try:
        create_topic(b.bootstrap, unique, 4)
        with RawClient(b.bootstrap) as c:
            tid = topic_id(c, unique)
        for _ in range(3000):
            socks.append(_connect(b.bootstrap))
        hb = codec.request_module(76, 1)
        joined = _call_all(socks[:200], [codec.encode_request(
            76, 1, 1, "t", hb.ShareGroupHeartbeatRequest(
                group_id=unique, member_id=f"member-{i}", member_epoch=0, rack_id=None,
                subscribed_topic_names=(unique,))) for i in range(200)], 76, 1)
        assert {r.error_code for r in joined} == {ErrorCode.none}
        sf = codec.request_module(78, 1)
        fetched = _call_all(socks[:2000], [codec.encode_request(78, 1, 2, "t", sf.ShareFetchRequest(
            group_id=unique, member_id=f"member-{i}", share_session_epoch=0,
            max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 16, max_records=1, batch_size=1,
            forgotten_topics_data=(), topics=(sf.FetchTopic(topic_id=tid, partitions=tuple(
                sf.FetchPartition(partition_index=p, acknowledgement_batches=())
                for p in range(4))),))) for i in range(2000)], 78, 1)
        assert {r.error_code for r in fetched} == {ErrorCode.none}
        answered = _call_all(socks, [_api_versions_frame(3)] * len(socks), 18, 3)
        assert len(answered) == 3000
        assert {r.error_code for r in answered} == {ErrorCode.none}
    finally:
        for s in socks:
            s.close()
        b.stop()


def test_announced_but_unsent_frames_do_not_starve_an_honest_large_request(tmp_path: Path) -> None:
    """60 clients announce a 50 MB frame and send a few bytes of it. Each holds what it sent
    (plus a small read-ahead) of queued.max.request.bytes, not the 50 MB it announced, so an
    honest 6 MB request on another connection is read and answered at once (before, it waited
    behind them until the partial-frame timeout closed them a few at a time)."""
    b = _started(tmp_path, {"queued.max.request.bytes": str(16 * 1024 * 1024)})
    stalled: list[socket.socket] = []
    try:
        valid = _api_versions_frame(11)
        announced = struct.pack(">i", 50_000_000) + valid[4:]
        for _ in range(60):
            s = _connect(b.bootstrap)
            s.sendall(announced)
            stalled.append(s)
        time.sleep(0.3)
        size = 6_000_000
        honest = _connect(b.bootstrap)
        stalled.append(honest)
        honest.settimeout(10)
        honest.sendall(struct.pack(">i", size) + valid[4:] + b"\x00" * (size + 4 - len(valid)))
        size_prefix = struct.unpack(">i", recv_exact(honest, 4))[0]
        assert struct.unpack(">i", recv_exact(honest, size_prefix)[:4])[0] == 11
    finally:
        for s in stalled:
            s.close()
        b.stop()
