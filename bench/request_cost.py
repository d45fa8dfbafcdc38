"""Micro-benchmark: what one request costs a broker, and what a share-state write over the wire
costs both ends (issue 23: the cluster's extra CPU follows its extra requests).

One ``shoal broker`` (no etcd), then, on one connection each, measured with ``/proc/<pid>/stat``
(the broker) and ``getrusage`` (this process, on uvloop as a broker is):

- ``metadata_sequential``: Metadata v4 without topics, one round trip at a time: a bare request,
  each one waking the broker's event loop from idle;
- ``metadata_pipelined``: the same requests sent ``--pipeline`` at a time: the request's own cost
  with the wake-ups shared (the difference is what a wake-up costs here);
- ``share_state_write``: WriteShareGroupState through ``persister.network_persister``, the path
  a share-partition leader takes to a share coordinator on another broker, one write at a time
  over 12 share-partitions. ``broker_us`` is the coordinator's end (the request, the write to
  ``__share_group_state`` and its fsync, the response); ``client_us`` the leader's end, which a
  single broker does not have (its persister calls the coordinator in-process).

    .venv/bin/python -m bench.request_cost [--requests N] [--writes N] [--pipeline K]

Figures swing with the machine's other work; compare runs of one sitting.
"""

from __future__ import annotations

import argparse
import base64
import json
import resource
import socket
import struct
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import uvloop

from bench.procs import PAGE_TICKS, ShoalBroker, recv_exact, stop_everything

_METADATA = 3
_NO_TOPICS = struct.pack(">ib", 0, 0)  # Metadata v4: no topics, no auto-creation


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    client_id = b"request-cost"
    message = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) \
        + client_id + body
    return struct.pack(">i", len(message)) + message


def _read_response(sock: socket.socket) -> None:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    recv_exact(sock, size)


def _broker_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid``, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / PAGE_TICKS, int(fields[12]) / PAGE_TICKS


def _per_request(pid: int, n: int, run: Any) -> dict[str, float]:
    (u0, s0), t0 = _broker_cpu(pid), time.perf_counter()
    run()
    (u1, s1), t1 = _broker_cpu(pid), time.perf_counter()
    return {"broker_us": round(1e6 * (u1 - u0 + s1 - s0) / n, 1),
            "broker_user_us": round(1e6 * (u1 - u0) / n, 1),
            "broker_sys_us": round(1e6 * (s1 - s0) / n, 1),
            "per_s": round(n / (t1 - t0))}


def bare_requests(broker: ShoalBroker, n: int, pipeline: int) -> dict[str, Any]:
    sock = socket.create_connection(("127.0.0.1", broker.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    one = _frame(_METADATA, 4, 1, _NO_TOPICS)
    many = one * pipeline

    def sequential() -> None:
        for _ in range(n):
            sock.sendall(one)
            _read_response(sock)

    def pipelined() -> None:
        for _ in range(n // pipeline):
            sock.sendall(many)
            for _ in range(pipeline):
                _read_response(sock)

    try:
        sequential()  # warm: the codec and the connection's first requests
        return {"metadata_sequential": _per_request(broker.pid, n, sequential),
                "metadata_pipelined": _per_request(broker.pid, n - n % pipeline, pipelined),
                "pipeline": pipeline}
    finally:
        sock.close()


def _first_share_group(bootstrap: str, topic: str) -> uuid.UUID:
    """Create ``topic`` (12 partitions) and use a share group once, so ``__share_group_state``
    exists; returns the topic's id."""
    from confluent_kafka import Producer, ShareConsumer, TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 12, 1)]).values():
        fut.result(30)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "request-cost-warm"})
    consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not consumer.poll(0.5):
        # The group reads from the latest offset: a record produced once it has joined.
        producer.produce(topic, b"x", partition=0)
        producer.flush(30)
    consumer.close()
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    text = str(described.topic_id)  # Kafka's form: URL-safe base64, unpadded
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


class _OneBroker:
    """The cluster metadata a NetworkPersister needs, for one broker leading everything."""

    def __init__(self, port: int) -> None:
        self._port = port

    def partition(self, topic: str, partition: int) -> Any:
        return SimpleNamespace(leader=1)

    def node(self, node_id: int, listener: str) -> Any:
        return SimpleNamespace(node_id=node_id, host="127.0.0.1", port=self._port)


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def state_writes(broker: ShoalBroker, topic_id: uuid.UUID, n: int) -> dict[str, Any]:
    from client.pool import ConnectionPool
    from persister.api import InitializeParams, PersisterStateBatch, SharePartitionKey, WriteParams
    from persister.network_persister import NetworkPersister

    persister = NetworkPersister(_OneBroker(broker.port), ConnectionPool("request-cost"),  # type: ignore[arg-type]
                                 listener="PLAINTEXT", num_partitions=50)
    keys = [SharePartitionKey(f"request-cost-{uuid.uuid4().hex[:6]}", topic_id, p)
            for p in range(12)]
    try:
        for key in keys:
            got = await persister.initialize(InitializeParams(key, 0, 0))
            assert got.error == 0, f"InitializeShareGroupState: {got}"

        async def write(i: int) -> None:
            first = i * 500
            got = await persister.write(WriteParams(
                keys[i % len(keys)], 0, 0, first, -1,
                (PersisterStateBatch(first, first + 499, 2, 1),)))
            assert got.error == 0, f"WriteShareGroupState: {got}"

        for i in range(200):  # warm
            await write(i)
        (u0, s0), c0, t0 = _broker_cpu(broker.pid), _own_cpu(), time.perf_counter()
        for i in range(200, 200 + n):
            await write(i)
        (u1, s1), c1, t1 = _broker_cpu(broker.pid), _own_cpu(), time.perf_counter()
    finally:
        await persister.close()
    return {"broker_us": round(1e6 * (u1 - u0 + s1 - s0) / n, 1),
            "client_us": round(1e6 * (c1 - c0) / n, 1),
            "round_trip_us": round(1e6 * (t1 - t0) / n, 1),
            "per_s": round(n / (t1 - t0))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--writes", type=int, default=4_000)
    ap.add_argument("--pipeline", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        broker = ShoalBroker(Path(work) / "data", Path(work) / "broker.log",
                             {"super.users": "User:ANONYMOUS",
                              "authorizer.class.name":
                                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
        try:
            broker.start()
            out = bare_requests(broker, args.requests, args.pipeline)
            topic_id = _first_share_group(broker.bootstrap, "request-cost")
            out["share_state_write"] = uvloop.run(state_writes(broker, topic_id, args.writes))
        finally:
            broker.stop()
            stop_everything()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
