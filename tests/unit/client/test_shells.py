"""The client core's two shells against a small scripted Kafka peer on a real socket: the
asyncio ``BrokerConnection`` (per-request deadlines, forgotten requests, bounded close, a peer
that is not Kafka) and the blocking ``BlockingConnection`` (start-up, exact frame reads)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from client.blocking import open_connection
from client.connection import BrokerConnection
from client.core import metadata_request
from client.errors import KafkaError
from protocol.codec import decode_request, encode_response, response_module
from protocol.framing import FrameDecoder
from protocol.messages import make

METADATA, API_VERSIONS = 3, 18
RANGES = {API_VERSIONS: (0, 3), METADATA: (0, 12)}


def _api_versions(error: ErrorCode = ErrorCode.none) -> Any:
    m = response_module(API_VERSIONS, 3)
    keys = tuple(make(m.ApiVersion, api_key=k, min_version=lo, max_version=hi)
                 for k, (lo, hi) in RANGES.items())
    return make(m.ApiVersionsResponse, error_code=error, api_keys=keys,
                throttle_time=timedelta(0), supported_features=(), finalized_features_epoch=-1,
                finalized_features=(), zk_migration_ready=False)


def _metadata(cluster_id: str) -> Any:
    m = response_module(METADATA, 12)
    return make(m.MetadataResponse, throttle_time=timedelta(0), brokers=(),
                cluster_id=cluster_id, controller_id=1, topics=())


# Answers ApiVersions, and Metadata with the topic name as the cluster id; like Kafka, in order.
def _answer(frame: bytes) -> bytes:
    req = decode_request(frame)
    if req.api_key == API_VERSIONS:
        return encode_response(API_VERSIONS, req.api_version, req.correlation_id,
                               _api_versions())
    name = req.body.topics[0].name
    return encode_response(METADATA, req.api_version, req.correlation_id, _metadata(name))


class _Peer:
    """An asyncio server whose connection handlers are all cancelled and closed at the end."""

    def __init__(self, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                         Awaitable[None]]) -> None:
        self._handler = handler
        self._tasks: list[asyncio.Task[None]] = []
        self._writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.append(task)  # type: ignore[arg-type]
        await self._handler(reader, writer)

    async def __aenter__(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for w in self._writers:
            w.close()
            try:
                await w.wait_closed()
            except OSError:
                pass
        await self._server.wait_closed()


async def _kafka(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    decoder = FrameDecoder()
    while data := await reader.read(65536):
        for frame in decoder.feed(data):
            req = decode_request(frame)
            if req.api_key == METADATA and req.body.topics[0].name == "slow":
                await asyncio.sleep(1.0)  # answered late, still in order
            writer.write(_answer(frame))


@pytest.fixture
async def peer() -> AsyncIterator[tuple[str, int]]:
    async with _Peer(_kafka) as address:
        yield address


def _metadata_req(topic: str) -> Any:
    return metadata_request(12, [topic])


async def test_a_missed_deadline_forgets_one_request_and_the_connection_goes_on(
        peer: tuple[str, int]) -> None:
    conn = BrokerConnection(*peer, client_id="t", request_timeout=5.0)
    await conn.connect(timeout=5.0)
    assert conn.version(METADATA, 10, 12) == 12
    with pytest.raises(TimeoutError):
        await conn.call(METADATA, 12, _metadata_req("slow"), timeout=0.2)
    resp = await conn.call(METADATA, 12, _metadata_req("after"))  # the late answer is dropped
    assert resp.cluster_id == "after" and not conn.closed
    pending = asyncio.ensure_future(conn.call(METADATA, 12, _metadata_req("slow")))
    await asyncio.sleep(0.05)
    async with asyncio.timeout(2):
        await conn.close()
    with pytest.raises(ConnectionError):
        await pending  # close fails what was still waiting
    await conn.close()  # idempotent
    assert conn.closed


async def test_pipelined_calls_each_get_their_own_answer(peer: tuple[str, int]) -> None:
    conn = BrokerConnection(*peer, client_id="t")
    await conn.connect()
    try:
        got = await asyncio.gather(*(conn.call(METADATA, 12, _metadata_req(f"t{i}"))
                                     for i in range(20)))
        assert [r.cluster_id for r in got] == [f"t{i}" for i in range(20)]
    finally:
        await conn.close()


async def test_a_peer_that_is_not_kafka_fails_the_connect_within_its_timeout() -> None:
    async def babble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")  # a size prefix of 1.2 GB

    async with _Peer(babble) as (host, port):
        conn = BrokerConnection(host, port, client_id="t")
        with pytest.raises(ConnectionError, match="outside"):
            await conn.connect(timeout=5.0)
        assert conn.closed


def _blocking_peer(handler: Callable[[socket.socket], None]) -> tuple[str, int]:
    srv = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        sock, _ = srv.accept()
        with sock:
            handler(sock)
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    host, port = srv.getsockname()[:2]
    return host, port


def test_blocking_shell_starts_up_and_reads_exactly_one_frame_per_reply() -> None:
    def handler(sock: socket.socket) -> None:
        decoder = FrameDecoder()
        while data := sock.recv(65536):
            for frame in decoder.feed(data):
                sock.sendall(_answer(frame) + (b"extra" if decode_request(frame).api_key == METADATA
                                    else b""))

    conn = open_connection(*_blocking_peer(handler), timeout_s=5.0, client_id="t")
    with conn:
        assert conn.channel.ready and conn.version(METADATA, 1, 12) == 12
        assert conn.call(METADATA, 12, _metadata_req("one")).cluster_id == "one"
        assert conn.sock.recv(5) == b"extra"  # bytes after the reply stay on the socket


def test_blocking_shell_maps_an_api_versions_error_to_a_kafka_error() -> None:
    def handler(sock: socket.socket) -> None:
        frame = FrameDecoder().feed(sock.recv(65536))[0]
        req = decode_request(frame)
        sock.sendall(encode_response(API_VERSIONS, 3, req.correlation_id, _api_versions(ErrorCode.unsupported_version)))
        sock.recv(1)

    with pytest.raises(KafkaError, match="UNSUPPORTED_VERSION"):
        open_connection(*_blocking_peer(handler), timeout_s=5.0, client_id="t")
