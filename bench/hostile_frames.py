"""Raw Kafka request frames and blocking socket helpers of the hostile bench (scenario h).

Wide requests are written byte by byte (kio's writer would take minutes for two million
partitions); ``tests/integration/clients/test_bench_smoke.py`` checks them against kio's
encoding of small ones. The others are built with kio (``kio_frame``/``entity``). Every socket
operation is bounded by the socket's timeout; ``call`` sends one frame and decodes its answer.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import uuid
from typing import Any

from bench.procs import recv_exact

FORGED_COUNT = 2**31 - 1
CLIENT_ID = b"shoal-bench-hostile"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _frame(api_key: int, version: int, correlation_id: int, body: bytes | bytearray,
           flexible: bool = True) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    if flexible:
        head += b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def wide_share_fetch_frame(correlation_id: int, group: str, member: str, topic_id: uuid.UUID,
                           partitions: int) -> bytes:
    """ShareFetch v1 opening a session (epoch 0) on ``partitions`` partitions of one topic."""
    buf = io.BytesIO()
    buf.write(_cstr(group) + _cstr(member))
    # epoch, max_wait, min_bytes, max_bytes, max_records, batch_size
    buf.write(struct.pack(">iiiiii", 0, 0, 1, 1 << 20, 500, 500))
    buf.write(_uvarint(2) + topic_id.bytes + _uvarint(partitions + 1))
    one = bytearray(6)
    one[4:6] = b"\x01\x00"  # no acknowledgement batches, no tagged fields
    pack = struct.Struct(">i").pack_into
    chunk = bytearray()
    for p in range(partitions):
        pack(one, 0, p)
        chunk += one
        if len(chunk) > 1 << 20:
            buf.write(chunk)
            chunk = bytearray()
    buf.write(chunk)
    buf.write(b"\x00" + b"\x01" + b"\x00")  # topic tags, no forgotten topics, request tags
    return _frame(78, 1, correlation_id, buf.getvalue())


def close_share_session_frame(correlation_id: int, group: str, member: str) -> bytes:
    body = _cstr(group) + _cstr(member) + struct.pack(">iiiiii", -1, 0, 0, 0, 0, 0)
    return _frame(78, 1, correlation_id, body + b"\x01\x01\x00")


def wide_fetch_frame(correlation_id: int, topic: str, partitions: int, max_bytes: int = 1 << 20,
                     partition_max_bytes: int = 1 << 20) -> bytes:
    """Fetch v12 (no session, no wait) of ``partitions`` partitions of one topic from offset 0."""
    buf = io.BytesIO()
    buf.write(struct.pack(">iiiibii", -1, 0, 1, max_bytes, 0, 0, -1))
    buf.write(_uvarint(2) + _cstr(topic) + _uvarint(partitions + 1))
    entry = struct.Struct(">iiqiqib")
    for p in range(partitions):
        buf.write(entry.pack(p, -1, 0, -1, -1, partition_max_bytes, 0))
    buf.write(b"\x00" + b"\x01" + _cstr("") + b"\x00")  # topic tags, forgotten, rack, tags
    return _frame(1, 12, correlation_id, buf.getvalue())


def forged_batch(count: int = FORGED_COUNT) -> bytes:
    """A 69-byte v2 batch with one real record that claims ``count`` records (valid CRC)."""
    import crc32c

    record = b"\x00\x00\x00\x01\x02x\x00"  # attributes, ts delta, offset delta, key -1, "x", 0 headers
    records = _uvarint(len(record) * 2) + record  # the record length is a zig-zag varint
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, 0, 0, -1, -1, -1, count) + records
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), 0, 2, crc)
    return head + after_crc


def kio_frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    from protocol.codec import encode_request, request_module
    from protocol.messages import make

    m = request_module(api_key, version)
    cls = next(getattr(m, n) for n in dir(m) if n.endswith("Request")
               and getattr(getattr(m, n), "__module__", "") == m.__name__)
    return encode_request(api_key, version, correlation_id, CLIENT_ID.decode(),
                          make(cls, **fields))


def entity(api_key: int, version: int, type_name: str, **fields: Any) -> Any:
    from protocol.codec import request_module
    from protocol.messages import make

    return make(getattr(request_module(api_key, version), type_name), **fields)


def forged_produce_frame(correlation_id: int, topic: str) -> bytes:
    part = entity(0, 9, "PartitionProduceData", index=0, records=forged_batch())
    data = entity(0, 9, "TopicProduceData", name=topic, partition_data=(part,))
    return kio_frame(0, 9, correlation_id, transactional_id=None, acks=1,
                      timeout=datetime.timedelta(seconds=10), topic_data=(data,))


def heartbeat_frame(correlation_id: int, group: str, member: str, epoch: int,
                    topics: tuple[str, ...] | None) -> bytes:
    return kio_frame(76, 1, correlation_id, group_id=group, member_id=member,
                      member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)


def share_fetch_frame(correlation_id: int, group: str, member: str, epoch: int,
                      topic_id: uuid.UUID) -> bytes:
    part = entity(78, 1, "FetchPartition", partition_index=0, acknowledgement_batches=())
    topic = entity(78, 1, "FetchTopic", topic_id=topic_id, partitions=(part,))
    return kio_frame(78, 1, correlation_id, group_id=group, member_id=member,
                      share_session_epoch=epoch, max_wait=datetime.timedelta(0), min_bytes=1,
                      max_bytes=1 << 16, max_records=1, batch_size=1,
                      topics=(topic,) if epoch == 0 else (), forgotten_topics_data=())


def list_offsets_frame(correlation_id: int, topic: str) -> bytes:
    part = entity(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
                   timestamp=-1)
    t = entity(2, 7, "ListOffsetsTopic", name=topic, partitions=(part,))
    return kio_frame(2, 7, correlation_id, replica_id=-1, isolation_level=0, topics=(t,))


def code_name(code: Any) -> str:
    """An error code's name (``none``, ``share_session_limit_reached``, ...)."""
    return str(getattr(code, "name", code))


def decode(api_key: int, version: int, frame: bytes) -> Any:
    from protocol.codec import decode_response

    return decode_response(api_key, version, frame)[1]


# ---------------------------------------------------------------------------------------------
# Socket helpers (blocking, every operation bounded)


def connect(addr: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(addr, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def call(s: socket.socket, api_key: int, version: int, frame: bytes) -> Any:
    s.sendall(frame)
    return decode(api_key, version, read_frame(s))


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    socks.clear()


def zigzag(v: int) -> bytes:
    return _uvarint((v << 1) ^ (v >> 63))
