"""Connection bounds without sockets: quotas, idle/partial sweeps, and back-pressure through a fake
transport (broker/connection_limits.py, broker/connection.py)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.clock import FakeClock
from broker.config import BrokerConfig, ConfigError
from broker.connection import Connection
from broker.connection_limits import ConnectionLimits, RequestMemory, parse_overrides
from broker.dispatch import Dispatcher
from protocol import codec
from protocol.messages import make

# -- quotas and sweeps --------------------------------------------------------------------------


def test_overrides_parse_and_bad_ones_are_config_errors() -> None:
    assert parse_overrides("10.0.0.1:5, [::1]:7,host-a:0") == {"10.0.0.1": 5, "::1": 7,
                                                               "host-a": 0}
    assert parse_overrides("") == {}
    for bad in ("10.0.0.1", "10.0.0.1:x", ":3", "h:-1"):
        with pytest.raises(ConfigError):
            BrokerConfig({"max.connections.per.ip.overrides": bad})


def _limits(**values: Any) -> ConnectionLimits:
    return ConnectionLimits(BrokerConfig({k.replace("_", "."): v for k, v in values.items()}).get)


def test_admit_counts_per_host_with_overrides_and_a_total() -> None:
    lim = _limits(max_connections=4, max_connections_per_ip=1,
                  max_connections_per_ip_overrides="10.0.0.9:2")
    assert lim.admit("10.0.0.1", "10.0.0.1:1", 0)
    assert not lim.admit("10.0.0.1", "10.0.0.1:2", 0)
    assert lim.admit("10.0.0.9", "a", 0) and lim.admit("10.0.0.9", "b", 0)
    assert not lim.admit("10.0.0.9", "c", 0)
    assert lim.admit("10.0.0.2", "d", 0)
    assert not lim.admit("10.0.0.3", "e", 0)  # 4 in total
    lim.release("10.0.0.1")
    assert lim.admit("10.0.0.3", "e", 0)
    assert lim.total == 4 and lim.per_host["10.0.0.9"] == 2


class _Conn:
    def __init__(self, idle: int | None, partial: int | None,
                 unauthenticated: int | None = None) -> None:
        self.peer = "p"
        self._idle, self._partial = idle, partial
        self._unauthenticated = unauthenticated
        self.closed: str | None = None

    def unauthenticated_since_ms(self) -> int | None:
        return self._unauthenticated

    def idle_since_ms(self) -> int | None:
        return self._idle

    def partial_frame_since_ms(self) -> int | None:
        return self._partial

    def close_for(self, reason: str, level: int = 0) -> None:
        self.closed = reason


def test_sweep_closes_idle_and_stalled_connections_only() -> None:
    lim = _limits(connections_max_idle_ms=1000, socket_request_partial_timeout_ms=300)
    fresh, idle, busy, stalled = (_Conn(900, None), _Conn(0, None), _Conn(None, None),
                                  _Conn(None, 600))
    assert lim.sweep([fresh, idle, busy, stalled], now_ms=1001) == 2
    assert idle.closed and "connections.max.idle.ms" in idle.closed
    assert stalled.closed and "socket.request.partial.timeout.ms" in stalled.closed
    assert fresh.closed is None and busy.closed is None


def test_sweep_closes_connections_that_do_not_authenticate_in_time() -> None:
    lim = _limits(connections_authentication_timeout_ms=500)
    slow, recent, done = _Conn(None, None, 0), _Conn(None, None, 600), _Conn(0, None, None)
    assert lim.sweep([slow, recent, done], now_ms=1001) == 1
    assert slow.closed and "connections.authentication.timeout.ms" in slow.closed
    assert recent.closed is None and done.closed is None


# -- back-pressure through a fake transport -----------------------------------------------------


class _Transport(asyncio.Transport):
    """Keeps everything written (the peer never reads) and records pause/resume."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0
        self.reading = True
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.1.1.1", 5555) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high = high

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: Any) -> None:
        self.buffered += len(data)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


MIB = 1 << 20


class _FetchModule:
    """A stand-in Fetch handler: every request is answered with 1 MiB of records."""

    API_KEY = 1
    VERSIONS = (13, 13)
    __name__ = "fake_fetch"
    calls = 0

    @classmethod
    async def handle(cls, ctx: Any, req: Any) -> Any:
        cls.calls += 1
        await asyncio.sleep(0)
        m = codec.response_module(1, 13)
        part = make(m.PartitionData, partition_index=0, error_code=ErrorCode.none, high_watermark=1,
                    last_stable_offset=1, log_start_offset=0, aborted_transactions=(),
                    preferred_read_replica=-1, records=b"\0" * MIB)
        return make(m.FetchResponse, throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0,
                    responses=(make(m.FetchableTopicResponse, topic_id=uuid.UUID(int=1),
                                    partitions=(part,)),), node_endpoints=())


class _Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.clock = FakeClock()
        self.dispatcher = Dispatcher([_FetchModule])  # type: ignore[list-item]
        self.connections: set[Any] = set()

    def on_connection_closed(self, connection_id: int) -> None:
        pass


def _fetch_frame(correlation_id: int) -> bytes:
    m = codec.request_module(1, 13)
    body = make(m.FetchRequest, replica_id=-1, max_wait=timedelta(0), min_bytes=1,
                max_bytes=MIB, isolation_level=0, session_id=0, session_epoch=-1,
                forgotten_topics_data=(), rack_id="",
                topics=(make(m.FetchTopic, topic_id=uuid.UUID(int=1), partitions=(make(
                    m.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=MIB),)),))
    return codec.encode_request(1, 13, correlation_id, "t", body)


async def test_unsent_responses_stop_reading_and_dispatch_until_the_client_reads() -> None:
    _FetchModule.calls = 0
    broker = _Broker(BrokerConfig({"queued.max.response.bytes": str(4 * MIB)}))
    conn = Connection(broker)  # type: ignore[arg-type]
    t = _Transport()
    conn.connection_made(t)
    conn.data_received(b"".join(_fetch_frame(i) for i in range(100)))  # one read, 100 fetches
    for _ in range(50):
        await asyncio.sleep(0)
    # About the bound's worth of responses was produced, not 100 MiB; the rest wait unread.
    assert 3 <= _FetchModule.calls <= 6, _FetchModule.calls
    assert t.buffered <= 6 * MIB
    assert not t.reading
    # The client reads everything: the waiting requests go on, a few at a time, to the end.
    while _FetchModule.calls < 100:
        before = _FetchModule.calls
        t.buffered = 0
        conn.resume_writing()
        for _ in range(50):
            await asyncio.sleep(0)
        assert _FetchModule.calls > before
    t.buffered = 0
    conn.resume_writing()
    await asyncio.sleep(0)
    assert t.reading and conn.in_flight == 0


class _Waiter:
    def __init__(self) -> None:
        self.granted = False

    def memory_granted(self) -> None:
        self.granted = True


def test_request_memory_grants_in_order_as_frames_complete() -> None:
    mem = RequestMemory(100)
    assert mem.reserve(60) and not mem.reserve(50)
    first, second = _Waiter(), _Waiter()
    mem.wait(first, 50)
    mem.wait(second, 10)
    mem.release(60)
    assert first.granted and second.granted and mem.used == 60
    gone = _Waiter()
    mem.wait(gone, 90)
    mem.forget(gone)  # its connection closed
    mem.release(50)
    mem.release(10)
    assert not gone.granted and mem.used == 0
    assert mem.reserve(500)  # larger than the budget: received alone
    assert not mem.reserve(1)
    assert RequestMemory(-1).reserve(10**12)  # -1: no limit
